"""The executors: a load shape's schedule (loadgen.shapes) run in real time. Each decides *when*
requests are sent and nothing else; measuring is the client's job and summarising the analysis
stage's.

- `closed_loop.run`: users joining at the shape's times, each sending its next request when its
  last one ends;
- `open_loop.run`: requests at the shape's arrival times, optionally capped in how many are in
  flight.
Both take a `Feed` (what to send) and a `Sender` (how to send one; it keeps the records) and
return what they observed of the sending itself (the closed loop: the spread of its users'
first sends), which the run reports as `load_info`.
"""

from loadgen.executors.feed import Feed, Item, Sender, Share

__all__ = ["Feed", "Item", "Sender", "Share"]
