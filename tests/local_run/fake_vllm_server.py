"""A stand-in for the vLLM API server, for launcher tests: /health and /v1/models only.

Run as ``python -m fake_vllm_server --port P [--model-name N] [--delay S] [--exit-code C]
[--child-pid-file F] [--ignore-sigterm]``. ``--child-pid-file`` starts a grandchild in the
same process group (like vLLM's engine core) and writes its pid, so a test can check that
stopping the server leaves no orphan.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-name", default="tiny")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int)
    parser.add_argument("--child-pid-file")
    parser.add_argument("--ignore-sigterm", action="store_true")
    args = parser.parse_args()
    print("fake vllm starting", flush=True)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child_pid_file:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(args.child_pid_file, "w") as handle:
            handle.write(str(child.pid))
    if args.exit_code is not None:
        print("fake vllm: failing on purpose", flush=True)
        return args.exit_code
    time.sleep(args.delay)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            if self.path == "/health":
                body = b""
            elif self.path == "/v1/models":
                body = json.dumps({"data": [{"id": args.model_name}]}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"fake vllm listening on {args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
