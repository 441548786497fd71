"""The ground-truth server process: ``bench.scripted_server`` serving a bench Workload.

Runs in its own process so the instrument under test never shares a GIL with it; send times
are ``time.perf_counter`` (CLOCK_MONOTONIC, shared by every process on Linux), so they
compare directly with the instruments' timestamps. Two server options differ from the
load-test suite's:

- ``precise_pacing=False``: pauses sleep without the ~1 ms busy-spin: the truth is the
  *recorded* send time, not the scripted one, and 256 spinning threads would steal the CPU
  the client needs;
- ``keep_alive=False``: every response says ``Connection: close``, so both instruments
  open one connection per stream (vllm bench serve's aiohttp pool otherwise raced the
  server's closes and failed ~15% of its requests with "Cannot write to closing transport");
- ``kernel_send_stamps=True``: the truth is the kernel's transmit time of each chunk
  (bench/send_stamps.py); the stamp taken after ``sendall`` returns waits for the GIL
  among 256 threads and is kept only to show how late it was.

``python -m bench.truth_server --workload JSON`` prints ``{"url", "port"}``;
``GET /_scripted/log`` returns what was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.workload import Workload

START_TIMEOUT_S = 30.0


def serve(workload: Workload) -> None:
    from bench import scripted_server

    server = scripted_server.ScriptedServer(
        lambda index, _body: workload.script(index),
        precise_pacing=False,
        keep_alive=False,
        kernel_send_stamps=True,
    )
    print(json.dumps({"url": server.url, "port": server.port}), flush=True)
    server.serve_forever()


class TruthServer:
    """Start/stop the server process; ``log()`` fetches its send log."""

    def __init__(self, workload: Workload, log_path: Path, cpus: set[int] | None = None) -> None:
        self.workload = workload
        self.cpus = cpus  # CPU affinity of the server process (None: inherit)
        self.log_path = log_path
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> TruthServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = json.dumps(
            {
                k: v
                for k, v in self.workload.to_dict().items()
                if k in ("ttft_s", "gap_s", "chunk_tokens")
            }
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.truth_server", "--workload", args],
            stdout=subprocess.PIPE,
            stderr=self.log_path.open("w"),
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if (cpus := self.cpus) else None,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"truth server did not start; see {self.log_path}")
        self.url = json.loads(line)["url"]
        return self

    def log(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/_scripted/log", timeout=60) as response:
            return json.loads(response.read())

    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bench ground-truth scripted server")
    parser.add_argument(
        "--workload", required=True, help='JSON: {"ttft_s": .., "gap_s": .., "chunk_tokens": [..]}'
    )
    args = parser.parse_args(argv)
    fields = json.loads(args.workload)
    fields["chunk_tokens"] = tuple(fields["chunk_tokens"])
    serve(Workload(**fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
