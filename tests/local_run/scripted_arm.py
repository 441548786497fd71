"""A scripted server (bench/scripted_server.py) as a process of its own, which can die on cue.

Run as ``python scripted_arm.py --port P --script JSON [--spec-decode-k K]
[--die-at N --dump PATH [--min-open M]]`` with the repository on ``PYTHONPATH``; ``--script`` is one
``Script``'s fields as JSON. It answers as ``ScriptedServer`` does (``GET /_scripted/log``:
every request it began and what it sent), paced without the spin (the truth here is the
log, not microsecond send times). It is a separate process so it can die for real.

``--die-at N``: once it has begun N requests, the first request to arrive while it has at
least M streams open (default 1), every one of them past its first content chunk and at
least three chunks from its end, is the cue. That request is never answered: the server
writes its log to ``--dump`` and SIGKILLs itself. The kernel closes its sockets under the
open streams, as when a server crashes: those streams are cut mid-response, and the cue
request, read but unanswered, dies before its first response byte, as does any request
waiting behind it.

The dump (JSON, then NUL padding): ``killed_at`` (``time.perf_counter``, one clock for
every process on Linux), ``cue`` (the unanswered request's ``received`` and ``headers``)
and ``log`` (every request begun; an open stream has no ``done_time``). Between the snapshot
and the kill nothing releases the GIL (the dump goes into a shared mapping of the file, the
switch interval is long) and every open stream is at least three chunk gaps from its end,
so none can finish in between: the open streams in the dump are the streams the kill cut.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import mmap
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from bench.scripted_server import Script, ScriptedServer

DUMP_SIZE = 16 << 20  # a sparse file: room for every request's log, costs nothing unused
END_MARGIN_CHUNKS = 3  # an open stream at the kill has at least this many chunks to go


class DyingServer(ScriptedServer):
    """A ScriptedServer of one script that SIGKILLs itself on cue (module docstring)."""

    def __init__(
        self, script: Script, *, die_at: int, dump: Path, min_open: int = 1, **kwargs: Any
    ) -> None:
        super().__init__(script, **kwargs)
        self.script = script
        self.die_at = die_at
        self.min_open = min_open
        self._cue = threading.Lock()
        with dump.open("wb") as area:
            area.truncate(DUMP_SIZE)
        descriptor = os.open(dump, os.O_RDWR)
        try:
            self._dump = mmap.mmap(descriptor, DUMP_SIZE)  # MAP_SHARED: survives the kill
        finally:
            os.close(descriptor)

    def begin(
        self,
        path: str,
        body: dict[str, Any],
        received: float,
        headers: dict[str, str] | None = None,
    ) -> tuple[Any, Script]:
        with self._cue:
            if len(self.log) >= self.die_at:
                switch = sys.getswitchinterval()
                sys.setswitchinterval(60.0)  # the other threads wait until the kill
                try:
                    if self._streams_mid_response():
                        self._die(received, headers or {})
                finally:
                    sys.setswitchinterval(switch)
            return super().begin(path, body, received, headers)

    def _streams_mid_response(self) -> bool:
        last = len(self.script.chunk_tokens) - END_MARGIN_CHUNKS
        streams = [e for e in self.log if e.done_time is None and e.fault is None]
        mid_response = all(1 <= len(e.send_times) <= last for e in streams)
        return len(streams) >= self.min_open and mid_response

    def _die(self, received: float, headers: dict[str, str]) -> NoReturn:
        snapshot = {
            "killed_at": time.perf_counter(),
            "cue": {"received": received, "headers": headers},
            "log": [dataclasses.asdict(entry) for entry in self.log],
        }
        data = json.dumps(snapshot).encode()
        self._dump[: len(data)] = data
        os.kill(os.getpid(), signal.SIGKILL)
        raise SystemExit("SIGKILL did not kill the server")  # unreachable


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", required=True, help="one Script's fields as JSON")
    parser.add_argument("--spec-decode-k", type=int, default=None)
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--min-open", type=int, default=1)
    args = parser.parse_args()
    script = Script(**json.loads(args.script))
    server: ScriptedServer
    if args.die_at is None:
        server = ScriptedServer(
            script, spec_decode_k=args.spec_decode_k, port=args.port, precise_pacing=False
        )
    else:
        if args.dump is None:
            parser.error("--die-at needs --dump")
        server = DyingServer(
            script,
            die_at=args.die_at,
            dump=args.dump,
            min_open=args.min_open,
            spec_decode_k=args.spec_decode_k,
            port=args.port,
            precise_pacing=False,
        )
    print(json.dumps({"url": server.url}), flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
