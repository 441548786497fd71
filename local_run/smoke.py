"""A direct check of both local servers, without Locust: one greedy streamed request each.

Useful on its own (``python -m local_run --smoke``: are the servers sane?) and as the
building block of the integration tests. It uses the load test's own streaming client and
/metrics parser, so what it checks is what the comparison measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from experiment.config import Arm, ExperimentConfig
from loadtest.acceptance import Counters, scrape
from loadtest.client import RequestParams, stream_request
from loadtest.probe import acceptance_by_class as probe_acceptance
from loadtest.records import RequestRecord
from loadtest.results import ClassAcceptance
from loadtest.transport import StreamSession

SMOKE_PROMPT = "Count from 1 to 60 in digits, separated by commas and a space, with no other text."


@dataclass
class ArmCheck:
    arm: Arm
    record: RequestRecord
    counters_before: Counters | None
    counters_after: Counters | None

    @property
    def spec_decode_exported(self) -> bool:
        return bool(self.counters_after)

    def counter_delta(self, name: str) -> float:
        after = (self.counters_after or {}).get(name, 0.0)
        return after - (self.counters_before or {}).get(name, 0.0)

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        return {
            "ok": record.ok,
            "error": record.error_detail,
            "output_tokens": record.output_tokens,
            "chunks": len(record.chunk_tokens),
            "text": record.text,
            "spec_decode_counters": self.counters_after or None,
        }


def request_params(config: ExperimentConfig, max_tokens: int | None = None) -> RequestParams:
    """The request every local check sends: greedy, fixed length, like the comparison."""
    lt = config.loadtest
    return RequestParams(
        model=config.serving.target_model,
        max_tokens=max_tokens or config.local.max_tokens,
        temperature=0.0,
        ignore_eos=True,
        seed=lt.seed,
        timeout_s=lt.request_timeout_s,
    )


def check_arm(arm: Arm, url: str, prompt: str, params: RequestParams, index: int = 0) -> ArmCheck:
    with requests.Session() as scrapes, StreamSession() as streams:
        before = scrape(url, scrapes)
        record = RequestRecord(
            arm=arm.value, index=index, prompt_id=f"smoke-{index}", prompt_class="smoke"
        )
        stream_request(streams, url, prompt, params, record)
        after = scrape(url, scrapes)
    return ArmCheck(arm, record, before, after)


def smoke_check(
    config: ExperimentConfig, urls: dict[Arm, str], prompt: str = SMOKE_PROMPT
) -> dict[Arm, ArmCheck]:
    params = request_params(config)
    return {arm: check_arm(arm, url, prompt, params) for arm, url in urls.items()}


def smoke_problems(checks: dict[Arm, ArmCheck]) -> list[str]:
    """What is wrong with a smoke result, phrased for a person; empty when all is well."""
    problems = []
    for arm, check in checks.items():
        if not check.record.ok:
            problems.append(f"{arm.value}: request failed: {check.record.error_detail}")
    baseline, speculative = checks.get(Arm.BASELINE), checks.get(Arm.SPECULATIVE)
    if baseline and baseline.spec_decode_exported:
        problems.append("baseline exports spec_decode counters: is it running a draft?")
    if speculative and not speculative.spec_decode_exported:
        problems.append("speculative arm exports no spec_decode counters on /metrics")
    if (
        baseline
        and speculative
        and baseline.record.ok
        and speculative.record.ok
        and baseline.record.text != speculative.record.text
    ):
        problems.append("greedy outputs differ between the arms (lossless check failed)")
    return problems


def acceptance_by_class(
    config: ExperimentConfig, speculative_url: str, max_tokens: int | None = None
) -> dict[str, ClassAcceptance]:
    """Acceptance per prompt class of the configured suite on the speculative server, with
    the local checks' request (loadtest.probe: one class at a time). Up to the server's batch
    size (``local.max_num_seqs``) of a class's requests run at once: the same per-class
    counts in a fraction of the wall time of one request at a time."""
    return probe_acceptance(
        config.loadtest.prompts.files,
        speculative_url,
        request_params(config, max_tokens),
        concurrency=config.local.max_num_seqs,
    )
