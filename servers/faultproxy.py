"""A TCP proxy that breaks the network between a client and a server, for tests: what a load
generator meets between itself and a real deployment (a slow link, a reset, a stalled or
dripping stream, a refused connect), at the TCP level, whatever the HTTP above it.

    python -m servers.faultproxy --upstream http://127.0.0.1:8000 --fault reset --after-bytes 600 --port 0

Faults apply to load connections only (those whose first bytes are a POST), to every
`--every`-th of them (1: all), from response byte `--after-bytes` on:
- `latency`: every response chunk held `--ms` milliseconds (data intact); with `--recv-buffer`
  a slow reader: at most that many bytes a read, so the server waits for it;
- `reset`: the connection reset (RST) once `--after-bytes` response bytes went through;
- `stall`: nothing more forwarded after `--after-bytes`, the connection held open;
- `drip`: the response forwarded at `--bytes-per-s`, a few bytes at a time;
- `refuse`: after `--after-connections` connections the proxy stops listening: later connects
  are refused.
Prints `listening on http://HOST:PORT` when ready (servers.embedded starts it like a server).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import sys

FAULTS = ("none", "latency", "reset", "stall", "drip", "refuse")


class Proxy:
    def __init__(self, args) -> None:
        self.args = args
        host, _, port = args.upstream.split("://", 1)[-1].rstrip("/").partition(":")
        self.up_host, self.up_port = host, int(port or 80)
        self.load_connections = 0
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None

    async def handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        a = self.args
        if a.fault == "refuse" and self.connections >= a.after_connections and self.server is not None:
            self.server.close()  # no more connections: later connects are refused
        try:
            u_reader, u_writer = await self._upstream()
        except OSError:
            c_writer.transport.abort()
            return
        first = await c_reader.read(65536)
        faulty = False
        if first.startswith(b"POST"):
            self.load_connections += 1
            faulty = a.fault not in ("none", "refuse") and self.load_connections % a.every == 0
        u_writer.write(first)
        up = asyncio.create_task(self._pipe(c_reader, u_writer))
        try:
            await self._respond(u_reader, c_writer, faulty)
        finally:
            up.cancel()
            for w in (u_writer, c_writer):
                if not w.is_closing():
                    w.close()

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the server; with --recv-buffer, its receive buffer set before the
        connect (the window the server may fill before it must wait)."""
        if self.args.recv_buffer is None:
            return await asyncio.open_connection(self.up_host, self.up_port)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.args.recv_buffer)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (self.up_host, self.up_port))
        except OSError:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock, limit=self.args.recv_buffer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _respond(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, faulty: bool) -> None:
        a = self.args
        sent = 0
        try:
            while data := await reader.read(a.recv_buffer or 65536):
                if faulty and a.fault == "latency":
                    await asyncio.sleep(a.ms / 1e3)
                if faulty and sent + len(data) > a.after_bytes and a.fault in ("reset", "stall", "drip"):
                    head, data = data[: max(0, a.after_bytes - sent)], data[max(0, a.after_bytes - sent) :]
                    writer.write(head)
                    await writer.drain()
                    sent += len(head)
                    if a.fault == "reset":
                        _reset(writer)
                        return
                    if a.fault == "stall":
                        await asyncio.sleep(3600)
                        return
                    await self._drip(data, writer)
                    sent += len(data)
                    continue
                writer.write(data)
                await writer.drain()
                sent += len(data)
        except (OSError, asyncio.CancelledError):
            pass

    async def _drip(self, data: bytes, writer: asyncio.StreamWriter) -> None:
        step = 8
        for i in range(0, len(data), step):
            writer.write(data[i : i + step])
            await writer.drain()
            await asyncio.sleep(step / self.args.bytes_per_s)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST instead of FIN: SO_LINGER on, timeout 0."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _main(args) -> None:
    proxy = Proxy(args)
    proxy.server = await asyncio.start_server(proxy.handle, args.host, args.port)
    port = proxy.server.sockets[0].getsockname()[1]
    print(f"listening on http://{args.host}:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        proxy.server.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="servers.faultproxy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--upstream", required=True, help="the server, http://host:port")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--every", type=int, default=1, help="fault every N-th load connection")
    p.add_argument("--after-bytes", type=int, default=0, help="response bytes let through first")
    p.add_argument("--after-connections", type=int, default=1, help="refuse: connections accepted first")
    p.add_argument("--ms", type=float, default=50.0, help="latency: milliseconds per response chunk")
    p.add_argument("--bytes-per-s", type=float, default=200.0, help="drip: the response's pace")
    p.add_argument(
        "--recv-buffer",
        type=int,
        metavar="BYTES",
        help="read the server through a receive buffer this small, at most this many bytes a read "
        "(with latency: a slow reader, whose server must wait for it)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    if args.every < 1:
        p.error("--every must be >= 1")
    if args.recv_buffer is not None and args.recv_buffer < 1:
        p.error(f"--recv-buffer must be at least 1 byte, got {args.recv_buffer}")
    try:
        asyncio.run(_main(args))
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
