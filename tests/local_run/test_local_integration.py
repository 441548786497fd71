"""Integration tier: the local run on real vLLM (CPU) servers with the generated tiny pair.

Both arms serve every request; the speculative arm's acceptance counters are present and
consistent and the baseline has none; every speculative response carries the request's own
acceptance, whose sums equal the counters' deltas over the window; greedy speculative output
equals the baseline's (lossless); the client's per-token accounting adds up to the server's
own totals.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from experiment.config import Arm, ExperimentConfig
from loadtest import RunSummary, run_comparison
from loadtest.plan import local_scale
from loadtest.probe import acceptance_by_class as probe_acceptance
from loadtest.prompts import load_prompts
from loadtest.records import read_records
from loadtest.render.headline import headline
from loadtest.render.plots import TIMESERIES_PLOT
from loadtest.results import AcceptanceSource
from local_run.smoke import (
    SMOKE_PROMPT,
    acceptance_by_class,
    check_arm,
    request_params,
    smoke_problems,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SUMMARY_SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "summary.schema.json"

STRUCTURED_PROMPT = SMOKE_PROMPT  # a counting task: the pair drafts it well
OPEN_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def server_counters(url: str) -> dict[str, float]:
    """Every counter sample on /metrics, summed over labels except ``position``."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            key = sample.name
            if "position" in sample.labels:
                key += f"[{sample.labels['position']}]"
            totals[key] = totals.get(key, 0.0) + sample.value
    return totals


@pytest.fixture(scope="module")
def comparison_dir(
    local_config: ExperimentConfig, running_servers: dict[Arm, str], tmp_path_factory: Any
) -> Path:
    run_dir = tmp_path_factory.mktemp("comparison")
    run_comparison(
        local_scale(local_config),
        running_servers[Arm.BASELINE],
        running_servers[Arm.SPECULATIVE],
        run_dir,
        local=True,
    )
    return run_dir


@pytest.fixture(scope="module")
def comparison(comparison_dir: Path) -> RunSummary:
    text = (comparison_dir / "summary.json").read_text()
    jsonschema.validate(json.loads(text), json.loads(SUMMARY_SCHEMA.read_text()))
    return RunSummary.model_validate_json(text)


def test_both_arms_served_every_request(
    comparison: RunSummary, local_config: ExperimentConfig
) -> None:
    prompts = load_prompts(local_config.loadtest.prompts.files)
    expected = len(prompts) * local_config.local.requests_per_prompt
    for arm in Arm:
        overall = comparison.arm(arm).overall
        assert overall.requests == expected, arm
        assert overall.succeeded == expected, (arm, overall.failures_by_reason)
        assert overall.failed == 0
        assert comparison.arm(arm).stopped_by == "schedule_done"


def test_acceptance_counters_present_and_consistent_for_sd_only(
    comparison: RunSummary, running_servers: dict[Arm, str], local_config: ExperimentConfig
) -> None:
    k = local_config.local_serving_spec(Arm.SPECULATIVE, "t", "d").num_speculative_tokens
    assert k is not None
    block = comparison.arm(Arm.SPECULATIVE)
    # The counters' own block (the arm's acceptance is the per-request sums: test below).
    sd = block.request_acceptance.counters if block.request_acceptance else block.acceptance
    assert sd.source is AcceptanceSource.MEASURED, sd.reason
    assert sd.drafts and sd.draft_tokens and sd.accepted_tokens is not None
    assert sd.acceptance_rate is not None
    assert 0 <= sd.accepted_tokens <= sd.draft_tokens <= sd.drafts * k
    assert 0.0 <= sd.acceptance_rate <= 1.0
    assert sd.mean_acceptance_length == pytest.approx(1 + sd.accepted_tokens / sd.drafts)
    rates = sd.per_position_rate
    assert rates is not None and len(rates) == k
    # Position i is accepted only if every earlier one was: the rates cannot increase.
    assert all(a >= b for a, b in itertools.pairwise(rates))
    assert sum(rates) * sd.drafts == pytest.approx(sd.accepted_tokens)
    assert comparison.arm(Arm.BASELINE).acceptance.available is False
    baseline_metrics = server_counters(running_servers[Arm.BASELINE])
    assert not [name for name in baseline_metrics if name.startswith("vllm:spec_decode")]
    assert any(
        name.startswith("vllm:spec_decode")
        for name in server_counters(running_servers[Arm.SPECULATIVE])
    )


def test_per_request_sums_equal_the_counter_deltas_of_the_window(
    comparison: RunSummary, comparison_dir: Path
) -> None:
    """The speculative server runs with --per-request-spec-decode-metrics (runtime/render.py):
    every measured response carried its request's figures, and over the window (warm-up
    left out of both) their sums equal the counters' deltas exactly, per position too."""
    block = comparison.arm(Arm.SPECULATIVE)
    per_request = block.request_acceptance
    assert per_request is not None
    overall, counters = per_request.overall, per_request.counters
    assert overall.missing == 0
    assert overall.with_figures == overall.requests == block.overall.succeeded > 0
    assert counters.source is AcceptanceSource.MEASURED, counters.reason
    sums = (overall.spec_steps, overall.draft_tokens, overall.accepted_tokens)
    assert sums == (counters.drafts, counters.draft_tokens, counters.accepted_tokens)
    assert overall.per_position_rate == pytest.approx(counters.per_position_rate)
    found = per_request.reconciliation
    assert found is not None and found.agrees, found
    assert found.requests_without_figures == 0
    assert block.acceptance.source is AcceptanceSource.PER_REQUEST
    assert not [w for w in comparison.warnings if "per-request" in w]
    # Per class, from the same figures: the classes' sums make up the whole.
    assert set(per_request.by_class) == {"open_ended", "structured"}
    assert sum(c.spec_steps for c in per_request.by_class.values()) == overall.spec_steps
    records = read_records(comparison_dir / "records_speculative.jsonl")
    assert all(r.has_spec_figures for r in records)  # the warm-up's responses carry them too
    assert comparison.arm(Arm.BASELINE).request_acceptance is None
    baseline = read_records(comparison_dir / "records_baseline.jsonl")
    assert not any(r.has_spec_figures for r in baseline)


def test_greedy_speculative_output_equals_baseline(
    comparison: RunSummary, comparison_dir: Path, local_config: ExperimentConfig
) -> None:
    prompts = load_prompts(local_config.loadtest.prompts.files)
    lossless = comparison.lossless
    assert lossless.applicable
    assert lossless.prompts_compared == len(prompts)
    assert lossless.exact_match_rate == 1.0, lossless.mismatches
    assert lossless.baseline_self_consistency == 1.0
    # Beyond the report's first-response comparison: every repeat of every prompt, both arms.
    texts: dict[str, set[str]] = {}
    for arm in Arm:
        for record in read_records(comparison_dir / f"records_{arm.value}.jsonl"):
            texts.setdefault(record.prompt_id, set()).add(record.text)
    assert len(texts) == len(prompts)
    assert {prompt: len(variants) for prompt, variants in texts.items() if len(variants) > 1} == {}


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_run_dir_holds_the_per_request_time_series(comparison_dir: Path) -> None:
    """The blog's figure (E2E and per-token ITL per request over the run, both arms) is
    written by a real comparison, is a PNG, and the report links it."""
    figure = comparison_dir / TIMESERIES_PLOT
    assert figure.is_file(), sorted(p.name for p in comparison_dir.iterdir())
    data = figure.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert TIMESERIES_PLOT in (comparison_dir / "report.md").read_text()


def test_per_token_accounting_matches_the_usage_totals(
    comparison_dir: Path, local_config: ExperimentConfig
) -> None:
    max_tokens = local_config.local.max_tokens
    for arm in Arm:
        records = read_records(comparison_dir / f"records_{arm.value}.jsonl")
        assert records
        for record in records:
            assert record.token_accounting == "usage"
            assert sum(record.chunk_tokens) == record.output_tokens == max_tokens, record.index
            assert len(record.chunk_tokens) == len(record.chunk_times)
        if arm == Arm.SPECULATIVE:  # speculation puts several tokens into some chunks
            assert any(tokens > 1 for r in records for tokens in r.chunk_tokens)


@pytest.mark.parametrize("prompt", [STRUCTURED_PROMPT, OPEN_PROMPT], ids=["structured", "open"])
def test_direct_requests_match_the_servers_own_token_counters(
    prompt: str, running_servers: dict[Arm, str], local_config: ExperimentConfig
) -> None:
    """Outside Locust: the server's Prometheus totals move by exactly what usage reported,
    and the greedy outputs of the two arms are identical."""
    params = request_params(local_config)
    checks = {}
    for arm, url in running_servers.items():
        before = server_counters(url)
        checks[arm] = check = check_arm(arm, url, prompt, params)
        after = server_counters(url)
        record = check.record
        assert record.ok, record.error_detail
        generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
        prompt_tokens = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
        assert generated == record.output_tokens == sum(record.chunk_tokens) == params.max_tokens
        assert prompt_tokens == record.prompt_tokens
        if arm == Arm.SPECULATIVE:
            drafts = check.counter_delta("num_drafts")
            accepted = check.counter_delta("num_accepted_tokens")
            # Every target step emits one token plus the drafts it accepted.
            assert drafts > 0
            assert params.max_tokens <= drafts + accepted + 1
    assert smoke_problems(checks) == []


def test_local_headline_states_acceptance_speedups_and_lossless_rate(
    comparison: RunSummary, tmp_path: Path
) -> None:
    numbers = headline(comparison)
    assert numbers.acceptance_rate == comparison.arm(Arm.SPECULATIVE).acceptance.acceptance_rate
    assert numbers.speedup_e2e_mean and numbers.speedup_e2e_mean > 0
    assert numbers.speedup_output_throughput and numbers.speedup_output_throughput > 0
    assert numbers.lossless_exact_match_rate == 1.0
    assert set(numbers.speedup_by_class) == {"open_ended", "structured"}
    json.dumps(numbers.model_dump(mode="json"))  # serialisable into local_run.json


def test_server_histograms_cover_the_window_and_agree_with_the_client_stream(
    comparison: RunSummary, local_config: ExperimentConfig
) -> None:
    """Each arm's own vLLM histograms (loadtest/server_latency.py) count exactly the measured
    requests of its window (the warm-up and the other arm's blocks left out), and their TPOT
    and per-token ITL agree with the client's within their resolution: the means to 10% (the
    client's TPOT also holds the API server's delay of the last chunk against the first,
    over 31 tokens), the client's median inside the server's p50 bucket."""
    decode_per_request = local_config.local.max_tokens - 1
    for arm in Arm:
        block = comparison.arm(arm)
        server = block.server_latency
        assert server is not None and server.available, server
        assert server.failed_scrapes == 0 and server.malformed_lines == 0
        latency = server.overall
        assert latency is not None and latency.tpot_ms and latency.ttft_ms and latency.step_gap_ms
        measured = block.overall.succeeded
        assert latency.tpot_ms.count == latency.ttft_ms.count == measured, arm
        assert latency.decode_tokens == measured * decode_per_request, arm
        client, mean = block.overall.tpot_ms, latency.tpot_ms.mean
        assert client.mean is not None and mean is not None
        assert client.mean == pytest.approx(mean, rel=0.1), arm
        assert latency.itl_ms_mean == pytest.approx(mean, rel=1e-6), arm  # both per token
        p50 = latency.tpot_ms.quantiles["p50"]
        assert client.p50 is not None and p50.bucket_high is not None
        slack = 0.1 * mean
        assert p50.bucket_low - slack <= client.p50 <= p50.bucket_high + slack, (arm, p50)
        if arm is Arm.SPECULATIVE:  # a step emits several tokens: fewer steps than tokens
            assert latency.step_gap_ms.count < latency.decode_tokens
        else:
            assert latency.step_gap_ms.count == latency.decode_tokens
    server_speedup = comparison.server_speedup
    assert server_speedup is not None
    tpot = server_speedup.overall["tpot_ms"]["mean"]
    assert tpot.estimate == pytest.approx(comparison.speedup_of("tpot_ms"), rel=0.15)
    assert tpot.low is not None and tpot.high is not None and tpot.low < tpot.estimate < tpot.high
    numbers = headline(comparison)
    assert numbers.speedup_source == comparison.per_token_source.value
    assert numbers.speedup_tpot_mean is not None  # from whichever source the run trusts


def test_acceptance_by_prompt_class(
    comparison: RunSummary, running_servers: dict[Arm, str], local_config: ExperimentConfig
) -> None:
    """Runs after the comparison (it needs the speculative server to itself)."""
    per_class = acceptance_by_class(local_config, running_servers[Arm.SPECULATIVE])
    assert set(per_class) == {"open_ended", "structured"}
    for block in per_class.values():
        assert block.failed == 0
        assert block.available, block.reason
        assert block.drafts and block.drafts > 0
        assert block.accepted_tokens is not None and block.draft_tokens is not None
        assert 0 <= block.accepted_tokens <= block.draft_tokens
    # The probe overlaps a class's requests (up to local.max_num_seqs): the per-class rates
    # are those of one request at a time, up to batched float32 arithmetic flipping a near
    # tie; requests of the other class in the window would move them by tens of points.
    one_at_a_time = probe_acceptance(
        local_config.loadtest.prompts.files,
        running_servers[Arm.SPECULATIVE],
        request_params(local_config),
        concurrency=1,
    )
    for name, block in per_class.items():
        assert block.acceptance_rate == pytest.approx(
            one_at_a_time[name].acceptance_rate, abs=0.03
        ), name
