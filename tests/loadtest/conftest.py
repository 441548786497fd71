"""Shared fixtures: scripted servers (ground truth) on ephemeral loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from loadtest.client import RequestParams
from loadtest.records import RequestRecord
from loadtest.scripted_server import ScriptedServer


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@pytest.fixture
def params() -> RequestParams:
    return RequestParams(model="test-model", max_tokens=16, timeout_s=2.0)


@pytest.fixture
def new_record():
    def make(index: int = 0) -> RequestRecord:
        return RequestRecord(arm="baseline", index=index, prompt_id="p", prompt_class="c")

    return make


@pytest.fixture
def serve() -> Iterator:
    servers: list[ScriptedServer] = []

    def start(scripts, **kwargs) -> ScriptedServer:
        server = ScriptedServer(scripts, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()

