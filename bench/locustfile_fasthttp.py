"""The load test's locustfile with FastHttpUser's HTTP client (geventhttpclient) as transport.

Bench only (transport comparison): schedule, warm-up, records, SSE parsing and timestamps
are ``loadtest/locustfile.py`` unchanged; ``bench.transports`` adapts the client.
"""

from __future__ import annotations

from locust.contrib.fasthttp import FastHttpSession

import loadtest.locustfile as base  # registers the loadtest's arguments and listeners
from bench.transports import FastHttpStreamSession


class FastStreamingUser(base.StreamingUser):
    def on_start(self) -> None:
        state = base.run_state(self.environment)
        if state is None:
            raise RuntimeError("no load-test plan in this Locust process")
        timeout = state.plan.params.timeout_s
        self.session = FastHttpStreamSession(
            FastHttpSession(
                self.host,
                request_event=self.environment.events.request,
                user=self,
                network_timeout=timeout,
                connection_timeout=timeout,
                concurrency=1,
            )
        )
