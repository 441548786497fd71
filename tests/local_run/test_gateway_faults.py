"""The rendered gateway under faults, for real: Envoy from PyPI in front of two fake streaming
arms (separate processes on 127.0.0.1), so each test takes seconds and is bounded.

(a) The speculative server is killed mid-run. Requests of speculative classes that had not
started streaming are served by the baseline with zero failures (retry before the first
byte, then ejection). Streams already cut mid-response fail and are counted by reason:
a retry cannot resume a stream whose bytes the client already has, so Envoy does not try.
When the server returns, traffic follows the policy again once the ejection time is over.

(b) Unknown, missing, repeated, oversized and forged class headers are each routed by the
allow-list rule (``RoutingConfig.arm_for``), never to an unintended backend.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gateway_harness import FAST_HEALTH, Outcome, send, stat, tiered

from experiment.config import Arm, FallbackConfig, HealthConfig, RoutingConfig
from local_run.gateway import decide

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HEADER = "x-prompt-class"
RULE = RoutingConfig().rule_name("structured")  # the rule's cluster: its statistics
ROUTING = RoutingConfig(health=FAST_HEALTH)
IN_FLIGHT = 3  # speculative streams open when the server dies
AFTER_KILL = 12  # speculative-class requests sent while it is dead
RETURN_WITHIN_S = 20.0  # ejection (2 s, doubled on a second ejection) + sweeps, with margin


def test_killing_the_speculative_server_mid_run(tmp_path: Path) -> None:
    # Long speculative streams (40 chunks, 0.1 s apart) so the kill lands mid-response.
    with tiered(ROUTING, tmp_path, speculative_chunks=40, gap_s=0.1) as (gateway, arms):
        structured = [(HEADER, "structured")]
        before = send(gateway.url, structured)
        assert before.ok and before.arm == Arm.SPECULATIVE.value, before

        started = [threading.Event() for _ in range(IN_FLIGHT)]
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            futures = [pool.submit(send, gateway.url, structured, started=e) for e in started]
            assert all(event.wait(10) for event in started), "streams did not start"
            arms[Arm.SPECULATIVE].kill()
            cut = [future.result(timeout=30) for future in futures]

        # Every open stream was on the speculative server and is cut, with a reason; none
        # completed by a retry (a started stream cannot be resumed).
        assert all(o.arm == Arm.SPECULATIVE.value and not o.ok for o in cut), cut
        reasons = Counter(o.reason for o in cut)
        print(f"cut streams by reason: {dict(reasons)}")  # shown with -s
        assert sum(reasons.values()) == IN_FLIGHT and None not in reasons, reasons
        assert all(0 < o.chunks < 40 for o in cut), cut

        with ThreadPoolExecutor(4) as pool:
            after = list(pool.map(lambda _: send(gateway.url, structured), range(AFTER_KILL)))
        failures = [o for o in after if not o.ok]
        assert not failures, failures
        assert {o.arm for o in after} == {Arm.BASELINE.value}
        # The cut streams' resets count as consecutive failures, so the dead server is ejected
        # and its classes go straight to the baseline (the retry path is the next test's).
        assert stat(gateway, f"cluster.{RULE}.outlier_detection.ejections_enforced_total") >= 1

        arms[Arm.SPECULATIVE].start()
        deadline = time.monotonic() + RETURN_WITHIN_S
        back: Outcome | None = None
        while time.monotonic() < deadline:
            outcome = send(gateway.url, structured)
            assert outcome.ok, outcome  # no failure while it returns either
            if outcome.arm == Arm.SPECULATIVE.value:
                back = outcome
                break
            time.sleep(0.25)
        assert back is not None, f"speculative arm not used again within {RETURN_WITHIN_S}s"
        # The other class never left the baseline.
        other = send(gateway.url, [(HEADER, "open_ended")])
        assert other.ok and other.arm == Arm.BASELINE.value


@pytest.mark.parametrize("failure", ["down", "http_500"])
def test_a_failing_speculative_attempt_is_retried_on_the_baseline(
    tmp_path: Path, failure: str
) -> None:
    with tiered(ROUTING, tmp_path / "retry") as (gateway, arms):
        if failure == "down":
            arms[Arm.SPECULATIVE].kill()
        else:
            arms[Arm.SPECULATIVE].kill()
            arms[Arm.SPECULATIVE].status = 500
            arms[Arm.SPECULATIVE].start()
        outcomes = [send(gateway.url, [(HEADER, "structured")]) for _ in range(5)]
        assert all(o.ok and o.arm == Arm.BASELINE.value for o in outcomes), outcomes
        # Saved by the retry until the outlier detection ejected the server.
        retried = stat(gateway, f"cluster.{RULE}.upstream_rq_retry_success")
        assert retried == ROUTING.health.consecutive_5xx
        if failure == "http_500":  # it was tried first, until ejected
            assert len(arms[Arm.SPECULATIVE].received()) >= 1


def test_without_retries_the_failure_reaches_the_client(tmp_path: Path) -> None:
    # Proof that the retry above is what saves those requests: with retries 0 it fails.
    no_retry = RoutingConfig(health=FAST_HEALTH, fallback=FallbackConfig(retries=0))
    with tiered(no_retry, tmp_path) as (gateway, arms):
        arms[Arm.SPECULATIVE].kill()
        first = send(gateway.url, [(HEADER, "structured")])
        assert first.status == 503 and first.reason == "http_503", first


@pytest.mark.parametrize(("budget", "refused"), [(1024, 0), (3, 1)])
def test_requests_falling_back_together_stay_within_the_retry_budget(
    tmp_path: Path, budget: int, refused: int
) -> None:
    # Four speculative-class requests fall back at once and stream from the baseline for
    # about 3 s, so four retries are in flight together. Envoy refuses a retry beyond its
    # circuit breaker's max_retries with a 503 (upstream_rq_retry_overflow): with Envoy's own
    # default, 3, the fourth fails; with routing.fallback.max_parallel_retries (1024) none
    # does. No ejection during the test: every request takes the retry path.
    routing = RoutingConfig(
        health=HealthConfig(consecutive_5xx=100, interval_s=10.0, base_ejection_time_s=2.0),
        fallback=FallbackConfig(max_parallel_retries=budget),
    )
    with tiered(routing, tmp_path, baseline_chunks=30, baseline_gap_s=0.1) as (gateway, arms):
        arms[Arm.SPECULATIVE].kill()
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(
                pool.map(lambda _: send(gateway.url, [(HEADER, "structured")]), range(4))
            )
        failed = [o for o in outcomes if not o.ok]
        assert len(failed) == refused, outcomes
        assert all(o.status == 503 for o in failed), failed
        assert all(o.arm == Arm.BASELINE.value for o in outcomes if o.ok), outcomes
        overflow = stat(gateway, f"cluster.{RULE}.upstream_rq_retry_overflow")
        assert overflow == refused


# Each case: the class header values exactly as sent. The expected arm is the allow-list rule's.
HEADER_CASES: dict[str, list[str]] = {
    "structured": ["structured"],
    "open_ended": ["open_ended"],
    "missing": [],
    "unknown": ["code"],
    "empty": [""],
    "upper-case": ["STRUCTURED"],
    "title-case": ["Structured"],
    "list": ["structured, open_ended"],
    "list-no-space": ["structured,open_ended"],
    "repeated": ["structured", "structured"],
    "repeated-mixed": ["open_ended", "structured"],
    "repeated-baseline": ["open_ended", "open_ended"],
    "repeated-with-empty": ["", "structured"],
    "surrounding-whitespace": ["  structured\t"],
    "inner-whitespace": ["struct ured"],
    "prefix": ["structured-please"],
    "oversized": ["structured" + "x" * 8000],
    "quoted": ['"structured"'],
}


@pytest.mark.parametrize("forged", [False, True])
def test_class_headers_are_routed_by_the_allow_list_rule(tmp_path: Path, forged: bool) -> None:
    with tiered(ROUTING, tmp_path) as (gateway, arms):
        for case, values in HEADER_CASES.items():
            headers = [(HEADER, value) for value in values]
            if forged:  # a client trying to steer the gateway with Envoy's own headers
                headers += [("x-envoy-retry-on", "5xx"), ("x-envoy-max-retries", "3")]
            outcome = send(gateway.url, headers)
            expected = ROUTING.arm_for(values)
            assert outcome.ok, (case, outcome)
            assert outcome.arm == expected.value, (case, values, outcome.arm)
            # The pure evaluator of the rendered bootstrap picks what the real Envoy picked.
            assert decide(gateway.bootstrap, {HEADER: values}) == outcome.arm, (case, values)
        # Each server saw exactly the requests routed to it.
        seen = {arm: server.received() for arm, server in arms.items()}
        speculative_cases = [
            v for v in HEADER_CASES.values() if ROUTING.arm_for(v) is Arm.SPECULATIVE
        ]
        assert len(seen[Arm.SPECULATIVE]) == len(speculative_cases)
        assert len(seen[Arm.BASELINE]) == len(HEADER_CASES) - len(speculative_cases)


def test_a_header_block_over_envoys_limit_reaches_no_backend(tmp_path: Path) -> None:
    with tiered(ROUTING, tmp_path) as (gateway, arms):
        # Envoy's max_request_headers_kb defaults to 60 KiB (data-plane-api:envoy/extensions/
        # filters/network/http_connection_manager/v3/http_connection_manager.proto).
        padding = [(f"x-pad-{i}", "p" * 4000) for i in range(20)]
        outcome = send(gateway.url, [(HEADER, "structured"), *padding])
        assert outcome.status == 431, outcome
        assert all(server.received() == [] for server in arms.values())
