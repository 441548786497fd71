"""The load test's locustfile with HttpUser's HTTP client (``requests``) as transport.

Bench only (transport comparison): schedule, warm-up, records, SSE parsing and timestamps
are ``loadtest/locustfile.py`` unchanged; ``bench.transports`` adapts the client.
"""

from __future__ import annotations

import loadtest.locustfile as base  # registers the loadtest's arguments and listeners
from bench.transports import RequestsStreamSession


class RequestsStreamingUser(base.StreamingUser):
    def on_start(self) -> None:
        self.session = RequestsStreamSession()
