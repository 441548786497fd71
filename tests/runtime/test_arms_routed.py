"""The load test's wait for the Rollout: each arm's Service must select its own revision."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from runtime.arms_routed import HASH_LABEL, ROLLOUTS_PATH, SERVICES_PATH, not_routed, wait

STABLE, CANARY = "base5f7", "spec9c1"


def _rollout(**status: Any) -> dict[str, Any]:
    return {"status": {"stableRS": STABLE, "currentPodHash": CANARY, **status}}


def _service(revision: str | None) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": "vllm"}
    if revision is not None:
        selector[HASH_LABEL] = revision
    return {"spec": {"selector": selector}}


def test_routed_when_each_service_selects_its_own_revision() -> None:
    assert not_routed(_rollout(), _service(STABLE), _service(CANARY)) is None


@pytest.mark.parametrize(
    ("rollout", "baseline", "speculative", "reason"),
    [
        # The canary is not available yet: Argo keeps the speculative Service on the stable pods.
        (_rollout(), _service(STABLE), _service(STABLE), "speculative Service selects"),
        # Argo has not adopted the Services yet: they select both arms' pods.
        (_rollout(), _service(None), _service(None), "baseline Service selects"),
        (_rollout(stableRS=None), _service(None), _service(None), "no stable"),
        # Created, not yet patched to the speculative template (or patched back).
        (_rollout(currentPodHash=STABLE), _service(STABLE), _service(STABLE), "no canary"),
        # The guardrail rollback: never measure the baseline as the speculative arm.
        (_rollout(abort=True), _service(STABLE), _service(CANARY), "aborted"),
    ],
)
def test_not_routed_says_why(rollout, baseline, speculative, reason: str) -> None:
    found = not_routed(rollout, baseline, speculative)
    assert found is not None and reason in found


def _args(timeout_s: float = 60.0) -> argparse.Namespace:
    return argparse.Namespace(
        namespace="qwen", rollout="r", baseline_service="base", speculative_service="sd",
        timeout_s=timeout_s, poll_s=15.0,
    )  # fmt: skip


class _Cluster:
    """The API server as the wait reads it; the canary becomes available after ``ready_at``
    polls, and the first read fails as an API server restarting would."""

    def __init__(self, ready_at: int) -> None:
        self.polls, self.ready_at, self.now = 0, ready_at, 0.0

    def read(self, path: str) -> dict[str, Any]:
        if path == ROLLOUTS_PATH.format(ns="qwen", name="r"):
            self.polls += 1
            if self.polls == 1:
                raise ConnectionRefusedError("API server restarting")
            return _rollout()
        if path == SERVICES_PATH.format(ns="qwen", name="base"):
            return _service(STABLE)
        assert path == SERVICES_PATH.format(ns="qwen", name="sd")
        return _service(CANARY if self.polls >= self.ready_at else STABLE)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_returns_once_routed_and_survives_a_failed_read() -> None:
    cluster = _Cluster(ready_at=3)
    assert wait(cluster.read, _args(), clock=lambda: cluster.now, sleep=cluster.sleep)
    assert cluster.polls == 3
    assert cluster.now == 30.0


def test_wait_gives_up_at_its_bound() -> None:
    cluster = _Cluster(ready_at=10**6)
    args = _args(timeout_s=40.0)
    assert not wait(cluster.read, args, clock=lambda: cluster.now, sleep=cluster.sleep)
    assert cluster.now == 40.0
