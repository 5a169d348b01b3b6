"""Load shapes. Each executor decides *when* requests are sent and nothing else; measuring is
the client's job and summarising the analysis stage's.

- `closed_loop.run`: N users, each sends its next request when its last one ends;
- `open_loop.run`: requests at scheduled times (an arrival schedule), optionally capped in
  how many are in flight.
Both take a `Feed` (what to send) and a `Sender` (how to send one) and return nothing: the
sender keeps the records.
"""
from loadgen.executors.feed import Feed, Item, Sender, Share

__all__ = ["Feed", "Item", "Sender", "Share"]
