"""A stand-in for one arm's vLLM server behind the gateway: it streams, and says who it is.

Run as ``python fake_streaming_arm.py --port P --name baseline [--chunks N] [--gap S]
[--status C]``.
``POST /v1/completions`` answers a server-sent-event stream of N chunks, ``--gap`` seconds
apart, then ``data: [DONE]``; the response carries ``x-arm: <name>`` so a test sees which
server answered through the gateway. ``GET /_received`` lists the class header values of
every POST it received (``null`` when missing), so a test can prove a request never reached
this server. It is a separate process so a test can kill it for real.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--gap", type=float, default=0.01)
    parser.add_argument("--class-header", default="x-prompt-class")
    parser.add_argument("--status", type=int, default=200, help="answer every POST with this")
    args = parser.parse_args()
    received: list[list[str] | None] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # http.server's naming
            with lock:
                body = json.dumps(received).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            values = self.headers.get_all(args.class_header)
            with lock:
                received.append(values)
            if args.status != 200:
                error = json.dumps({"error": "failing on purpose"}).encode()
                self.send_response(args.status)
                self.send_header("Content-Length", str(len(error)))
                self.send_header("x-arm", args.name)
                self.end_headers()
                self.wfile.write(error)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("x-arm", args.name)
            self.end_headers()
            for index in range(args.chunks):
                event = f"data: {json.dumps({'arm': args.name, 'chunk': index})}\n\n".encode()
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
                time.sleep(args.gap)
            done = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
            self.wfile.flush()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"fake arm {args.name} listening on {args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
