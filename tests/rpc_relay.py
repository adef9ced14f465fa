"""A localhost TCP relay that delays every message by a fixed one-way latency: a network
between an RPC client and its server, for tests and benchmarks/bench_rpc.sh.

    python tests/rpc_relay.py --listen 50060 --to 127.0.0.1:50052 --delay-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time


class Relay:
    """Forwards 127.0.0.1:`port` to `upstream`, each chunk `delay` seconds late (order
    kept); `freeze()` stops forwarding without closing (a server gone silent). Runs in
    a daemon thread for at most `lifetime` seconds."""

    def __init__(self, upstream: tuple[str, int], delay: float = 0.0, port: int = 0,
                 lifetime: float = 1800.0) -> None:
        self.upstream, self.delay, self.lifetime = upstream, delay, lifetime
        self.port = port
        self.frozen = False
        self.n_chunks = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="rpc-relay")

    def __enter__(self) -> Relay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("relay did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def freeze(self) -> None:
        self.frozen = True

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(lambda: self._stop.done() or self._stop.set_result(None))  # type: ignore[union-attr]
            self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = self._loop.create_future()
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop, self.lifetime)
        server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(self._pipe(c_reader, s_writer), self._pipe(s_reader, c_writer),
                             return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                while self.frozen:
                    await asyncio.sleep(3600)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(1 << 20)
                self.n_chunks += 1
                await queue.put((time.monotonic() + self.delay, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--to", required=True, help="HOST:PORT")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--lifetime", type=float, default=3600.0)
    a = ap.parse_args()
    host, _, port = a.to.rpartition(":")
    with Relay((host, int(port)), a.delay_ms / 1000, a.listen, a.lifetime) as relay:
        print(f"relay 127.0.0.1:{relay.port} -> {a.to}, {a.delay_ms:g} ms each way", flush=True)
        relay._thread.join()


if __name__ == "__main__":
    main()
