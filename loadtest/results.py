"""The typed results of a run: what ``summarize()`` returns and summary.json holds.

summary.json is ``RunSummary.model_dump_json()``; its JSON Schema is generated from these
models (``python -m loadtest schema``, published as docs/schemas/summary.schema.json).
Every renderer (console table, Markdown, HTML, CSV, plots, CloudWatch datums, the local
run's headline) reads these models, never the JSON.

Extending: add a field with a default (``None`` or an empty container) to the model that
owns the concern, or a new nested model; bump ``SCHEMA_VERSION`` when the shape changes
and regenerate the schema. Units are in the field names (``_ms``, ``_s``, ``_rps``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from experiment.config import Arm, StatisticsConfig
from experiment.config.guardrails import LiveGuardrailConfig

# 1: the untyped dict of the first releases (no "cloudwatch" key unless published, no
#    "reason" on an available acceptance block). 2: this model; every key always present.
SCHEMA_VERSION = 15
# 3: paired bootstrap statistics, cost per 1M output tokens and the verdict (issue 12):
#    RunSummary.statistics/cost/verdict and RunInfo.analysis (None/empty for older runs).
# 4: RunInfo.served_models, what the servers really serve when the model name is an alias
#    (the local run's generated miniatures; None for older runs).
# 5: Acceptance.source (measured / estimated / not available) and the lossless tolerance
#    figures: Lossless.prefix_agreement_rate, tokens_compared, LosslessMismatch.agreement
#    and compared_tokens (issue 23); RunInfo.arms_mode and RunSummary.arms_timing (issue 25:
#    concurrent arms).
# 6: the tiered arm (issue 24): RunSummary.tiered, RunInfo.tiered, RequestInfo.class_header
#    and, when the run drove the gateway, a third entry "tiered" in arms and run.urls;
#    ArmsTiming.block_order, block_requests and block_overhead_s (issue 25: alternating
#    arms).
# 7: the acceptance floors the pilot supports (RunSummary.floors, AnalysisInfo.
#    pilot_floor_factor): per class the verdict routes to SD, factor x its acceptance's lower
#    bound, or why there is none.
# 8: a replayed trace (issue 31): RunInfo.load_shape.traffic_file and time_scale, per class
#    and input-length bucket PairedStatistics.by_bucket, CostSummary.by_bucket,
#    RunSummary.verdict_by_bucket (ClassVerdict.input_bucket) and bucket_flips.
# 9: the equivalence outcome (issue 33): Decision "no gain" (the cost ratio's interval inside
#    statistics.equivalence_margin: keep the baseline), ClassVerdict.equivalence_bounds and
#    the margin in AnalysisInfo.statistics.
# 10: the gateway's own cost during the tiered arm (issue 33): TieredComparison.gateway
#    (None: not measured, e.g. a gateway the run did not start).
# 11: a replayed trace's buckets follow the edges at report time: AnalysisInfo.length_buckets
#    (the run's edges; `report -c loadtest.traffic.length_buckets=...` replaces them) and
#    each record's input_tokens (records of schema 8 to 10 carried a fixed bucket label,
#    which is no longer read: rerun such a trace for its per-bucket verdict).
# 12: per-token latency from each serving arm's own vLLM histograms over its window (issue 40):
#    ArmSummary.server_latency, RunSummary.server_speedup, and RunSummary.per_token_source
#    (client stream or server histograms) with per_token_source_reason: which source the
#    headline's TTFT and TPOT speedups come from.
# 13: multiple comparisons across a replayed trace's cells (issue 40): ClassVerdict.p_value
#    and adjusted_p_value (Holm); each cell's cost_ratio is read at its Holm level.
# 14: acceptance per request (vLLM --per-request-spec-decode-metrics): AcceptanceSource
#    "per request", ArmSummary.request_acceptance (per class, the counters' own block and
#    their reconciliation); None for servers without the figures and for older runs.
# 15: a proposed floor's interval from the requests' own figures where the run has them:
#    ClassFloor.acceptance_source ("per request", or "estimated": tokens per chunk); and
#    RunInfo.load_shape.burst_writes: a trace's bursts written together.


class _Result(BaseModel):
    # Unknown keys are an error: a typo in an extension must not pass silently.
    # Attribute docstrings become the field descriptions of the published JSON Schema.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Distribution(_Result):
    """Exact statistics of one per-request or per-token quantity (None: no samples)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    def stat(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


class MetricBlock(_Result):
    """Client-side metrics of one arm over one scope (all classes, or one prompt class)."""

    requests: int
    succeeded: int
    failed: int
    failures_by_reason: dict[str, int] = Field(default_factory=dict)
    output_tokens_total: int = 0
    length_mismatches: int = 0
    inexact_token_accounting: int = 0
    """Responses without per-chunk usage: their tokens per chunk are counted as 1."""
    slo_met: int = 0
    slo_attainment: float | None = None
    """slo_met / requests."""
    ttft_ms: Distribution
    """Request start -> first chunk carrying generated content."""
    tpot_ms: Distribution
    """(e2e - ttft) / (output_tokens - 1) per request (vLLM's definition)."""
    itl_ms: Distribution
    """Inter-token latency per token: a chunk of n tokens after a gap g gives n values g/n."""
    chunk_gap_ms: Distribution
    """Raw time between consecutive content chunks (not per token)."""
    e2e_ms: Distribution
    """Request start -> end of the stream."""
    output_tokens_per_s: Distribution
    """output_tokens / e2e, per request."""
    tokens_per_chunk: Distribution
    """Tokens each content chunk carried (from the server's cumulative usage)."""
    burst_gap_fraction: float | None = None
    """Share of chunk gaps under BURST_GAP_S."""
    output_throughput_tok_s: float | None = None
    """Total output tokens / measured window (first start -> last end)."""
    request_throughput_rps: float | None = None
    goodput_rps: float | None = None
    """Requests meeting every SLO per second."""

    def distribution(self, name: str) -> Distribution:
        value = getattr(self, name)
        if not isinstance(value, Distribution):
            raise KeyError(f"{name} is not a distribution of MetricBlock")
        return value


class LengthMismatch(_Result):
    index: int
    prompt_id: str
    requested: int
    got: int | None


class AcceptanceSource(StrEnum):
    """Where an arm's acceptance figure comes from (loadtest.acceptance decides), best first."""

    PER_REQUEST = "per request"
    """Every measured request that succeeded carried the server's own figures (vLLM
    --per-request-spec-decode-metrics: metrics.speculative_decoding on its final usage chunk)
    and the figure is their sum: accepted / drafted tokens, 1 + accepted / verify steps. Per
    prompt class under any mix of traffic; reconciled with the counters
    (ArmSummary.request_acceptance)."""
    MEASURED = "measured"
    """The server's vllm:spec_decode_* counters moved over the window (vLLM V1, vllm-neuron
    1.x): the acceptance figures are real."""
    ESTIMATED = "estimated"
    """The server exports no spec-decode counters at all (the published vLLM 0.9 fork, V0
    engine): acceptance is the client-side estimate from tokens per chunk
    (statistics.*.acceptance_rate_estimate), labelled as such."""
    NOT_AVAILABLE = "not available"
    """No figure: the counters exist but did not move while the arm served tokens
    (vllm-neuron 0.2.x registers them and never increments them), /metrics could not be
    read, the arm served nothing, or it does not speculate. Never reported as 0."""

    @property
    def from_server(self) -> bool:
        """The server measured the figure (its per-request figures or its counters)."""
        return self in (AcceptanceSource.PER_REQUEST, AcceptanceSource.MEASURED)


class Acceptance(_Result):
    """Speculative acceptance of an arm over the measured window: the sum of each request's
    own figures or the server's /metrics counter deltas (None: not measured)."""

    available: bool
    """True exactly when the server measured it: source per request or measured."""
    source: AcceptanceSource
    """per request (each request's figures), measured (counters), estimated (no counters:
    client-side estimate) or not available; ``reason`` says why when not available.
    Derived from ``available`` when absent (summaries before schema 5): measured or not
    available."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens over the measured window."""
    mean_acceptance_length: float | None = None
    """1 + accepted / drafts: tokens per target step."""
    per_position_rate: list[float] | None = None
    drafts: float | None = None
    """Verify steps (vllm:spec_decode_num_drafts): the per-request sum or the counter delta,
    as ``source`` says."""
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    reason: str | None = None
    """Why the values are not available (None when they are)."""

    @model_validator(mode="before")
    @classmethod
    def _default_source(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("source") is None:
            available = bool(data.get("available"))
            source = AcceptanceSource.MEASURED if available else AcceptanceSource.NOT_AVAILABLE
            data = {**data, "source": source}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Acceptance:
        if self.available != self.source.from_server:
            raise ValueError(
                f"acceptance: available={self.available} contradicts source {self.source.value!r}"
                " (available means measured by the server: per request or by its counters)"
            )
        return self


class RequestAcceptance(_Result):
    """Acceptance of one scope (all classes, or one prompt class), summed from the server's
    figures of each measured request that succeeded (loadtest.acceptance)."""

    requests: int
    """Measured requests of the scope that succeeded."""
    with_figures: int
    """Of them, those whose response carried the server's figures."""
    spec_steps: int
    """Verify steps, summed (num_spec_steps)."""
    draft_tokens: int
    """Drafted tokens, summed (num_draft_tokens)."""
    accepted_tokens: int
    """Accepted drafted tokens, summed (num_accepted_draft_tokens)."""
    histogram: list[int] | None = None
    """Steps that accepted exactly j drafts, j = 0..k, summed (None: a response came without
    its acceptance_histogram)."""
    missing: int = 0
    """requests - with_figures: responses without figures, counted and never estimated (the
    sums cover only the others). Derived."""
    acceptance_rate: float | None = None
    """accepted_tokens / draft_tokens (None: nothing drafted). Derived."""
    mean_acceptance_length: float | None = None
    """1 + accepted_tokens / spec_steps: tokens per target step (None: no step). Derived."""
    per_position_rate: list[float] | None = None
    """Position i: steps that accepted more than i drafts / spec_steps, as the counters'
    per-position rate (None: no histogram or no step). Derived."""

    @model_validator(mode="after")
    def _derived(self) -> RequestAcceptance:
        # Derived, never trusted from input (as Interval.significant).
        steps, histogram = self.spec_steps, self.histogram
        rates = None
        if histogram and steps:
            rates = [sum(histogram[i + 1 :]) / steps for i in range(len(histogram) - 1)]
        derived = {
            "missing": self.requests - self.with_figures,
            "acceptance_rate": (
                self.accepted_tokens / self.draft_tokens if self.draft_tokens else None
            ),
            "mean_acceptance_length": 1.0 + self.accepted_tokens / steps if steps else None,
            "per_position_rate": rates,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        return self

    @property
    def complete(self) -> bool:
        """Every request of the scope carried figures, and the server drafted for them."""
        return self.with_figures > 0 and self.missing == 0 and self.draft_tokens > 0


class AcceptanceReconciliation(_Result):
    """The per-request sums against the /metrics counter deltas of the same window.

    vLLM counts both in one branch of its scheduler with the same draft count
    (guardrails/vllm_metrics.py), and records the counters in the pass of its output loop
    that hands a request its last output, before the stream can end (up to 128 requests per
    step: VLLM_V1_OUTPUT_PROC_CHUNK_SIZE), so over the same requests they are equal: the
    tolerance is 0. Warm-up requests are outside
    both (they end before the window's first scrape). The window's requests without figures
    (failed, still in flight at the close, or answered without figures) hold steps the
    counters count and the sums do not: then the counters may exceed the sums, by at most
    the steps those requests can hold, and by no more drafts than k per step."""

    counter_drafts: float
    counter_draft_tokens: float
    counter_accepted_tokens: float
    request_steps: int
    request_draft_tokens: int
    request_accepted_tokens: int
    requests_without_figures: int
    """Measured requests the counters saw without figures: failed, in flight at the
    window's close, or succeeded without figures."""
    allowance_steps: int | None
    """The most verify steps those requests can hold (each step emits at least one token
    after the prefill's: max_tokens - 1 per request, or output_tokens - 1 where known); None:
    unknown (a Locust worker was lost with its records)."""
    agrees: bool
    reason: str
    """What the comparison found, for the report."""


class ArmRequestAcceptance(_Result):
    """An arm's acceptance from each measured request's own figures (vLLM
    --per-request-spec-decode-metrics), overall and per prompt class, next to the counters."""

    overall: RequestAcceptance
    by_class: dict[str, RequestAcceptance] = Field(default_factory=dict)
    """Per prompt class of the measured requests, whatever their mix in the window."""
    counters: Acceptance
    """The /metrics counters' own block over the same window (the arm's acceptance whenever
    the per-request figures are incomplete)."""
    reconciliation: AcceptanceReconciliation | None = None
    """None: the counters did not measure the window (see ``counters.reason``)."""


class ClassAcceptance(Acceptance):
    """Acceptance of one prompt class, probed one class at a time (loadtest.probe)."""

    prompts: int
    failed: int
    """Requests of the probe that failed."""


class ArrivalStampCounts(_Result):
    """Which clock stamped the arrival of the measured requests' network reads
    (loadtest.transport)."""

    kernel: int
    """The kernel's receive timestamp (SO_TIMESTAMPNS): the client's own scheduling delay
    before it read the bytes is left out."""
    user: int
    """The client's clock as recv returned (no kernel stamp: TLS, non-Linux, the first reads
    after timestamping was switched on, or an impossible stamp): includes that delay."""


class LatencySource(StrEnum):
    """Where a run's headline TTFT and TPOT figures come from (loadtest.summary decides)."""

    CLIENT_STREAM = "client stream"
    """The client's receive stamps of each streamed chunk (MetricBlock): used while both arms'
    chunks arrive smoothly."""
    SERVER_HISTOGRAMS = "server histograms"
    """Each arm's own vLLM histograms over its window (ArmSummary.server_latency), stamped
    with the engine core's step timestamps: used when an arm's chunks arrived in bursts, which
    the API server's grouping of tokens causes and the engine's stamps do not see."""


class HistogramQuantile(_Result):
    """A quantile interpolated from a histogram's bucket deltas, with the bucket it lies in."""

    value: float
    """Linear interpolation inside the bucket (Prometheus histogram_quantile's method; the
    lowest bucket starts at 0, and a quantile in the +Inf bucket is its lower edge)."""
    bucket_low: float
    """The bucket's lower edge: the quantile's resolution is [bucket_low, bucket_high]."""
    bucket_high: float | None
    """Its upper edge (None: the +Inf bucket)."""


class HistogramDistribution(_Result):
    """One latency histogram of a server, as its change over the measured window (ms)."""

    metric: str
    """The vLLM histogram (guardrails/vllm_metrics.py)."""
    count: int
    """Observations over the window."""
    mean: float | None = None
    """Exact: the change of the histogram's sum / the change of its count."""
    quantiles: dict[str, HistogramQuantile] = Field(default_factory=dict)
    """p50, p90, p99 from the bucket deltas (empty: no observation)."""
    buckets: list[float] = Field(default_factory=list)
    """The finite bucket edges (ms) the quantiles were read from: their resolution."""


class ServerLatency(_Result):
    """Latency from one arm's own vLLM histograms over one scope (all classes, or a class)."""

    ttft_ms: HistogramDistribution | None = None
    """vllm:time_to_first_token_seconds: per request, from its arrival at the engine."""
    tpot_ms: HistogramDistribution | None = None
    """vllm:request_time_per_output_token_seconds: per finished request, (last token's step -
    first token's step) / (tokens - 1): the client's TPOT on the engine's clock."""
    step_gap_ms: HistogramDistribution | None = None
    """vllm:inter_token_latency_seconds: per request and engine step, the time since its
    previous step; a speculative step that emits several tokens is one observation."""
    itl_ms_mean: float | None = None
    """Per-token inter-token latency: the step gaps' sum / decode_tokens (the client's
    itl_ms mean, token-weighted); None without the generation counter."""
    decode_tokens: int | None = None
    """Generated tokens after each request's first: vllm:generation_tokens minus the TTFT
    histogram's count, over the window."""
    windows: int = 1
    """Scrape windows summed into this scope (an alternating arm's blocks)."""


class ArmServerLatency(_Result):
    """An arm's server-side latency: overall, and per class where classes ran alone."""

    available: bool
    reason: str | None = None
    """Why there is no overall figure (None when there is)."""
    overall: ServerLatency | None = None
    by_class: dict[str, ServerLatency] = Field(default_factory=dict)
    """Classes that ran in blocks of their own (alternating arms; the histograms cannot tell
    classes apart inside one window): each from the windows holding only that class."""
    class_note: str | None = None
    """Why some or every class has no figure of its own."""
    scrapes: int = 0
    """/metrics scrapes this arm's window recorded (two per window)."""
    failed_scrapes: int = 0
    """Scrapes that could not be read (connection, HTTP error, unusable body)."""
    malformed_lines: int = 0
    """Lines of the latency histograms that could not be parsed (skipped, not fatal)."""


class ArmSummary(_Result):
    """One serving arm: how its Locust window ended, its metrics and its acceptance."""

    label: str
    """config.loadtest.variant_labels[arm]; the CloudWatch Variant dimension value."""
    url: str
    stopped_by: str
    """Why the arm ended: schedule_done (every request sent), time_limit, worker_lost,
    cancelled (SIGINT/SIGTERM), killed or crashed (Locust process), not_run (no window
    file)."""
    unfinished_requests: int = 0
    load_generator_cpu: float | None = None
    """Share of one core used by the Locust process (the busiest worker's with workers)."""
    workers: int = 1
    """Locust worker processes that drove the arm (1: one process, no master)."""
    worker_cpu: dict[str, float | None] = Field(default_factory=dict)
    """Each worker's share of its core over its window, by Locust worker index."""
    lost_workers: list[int] = Field(default_factory=list)
    """Workers that stopped answering mid-run; their unsent requests count as not started."""
    clock_skew_ms: float | None = None
    """Spread of the workers' wall-clock offsets (window and throughput use wall clocks)."""
    arrival_stamps: ArrivalStampCounts | None = None
    """Reads stamped per clock, summed over workers (None: not recorded by this client)."""
    not_started_requests: int = 0
    window_s: float = 0.0
    warmup_excluded: int = 0
    arrival_lag_ms: Distribution
    """Open loop: how late requests left vs their arrival time."""
    overall: MetricBlock
    by_class: dict[str, MetricBlock] = Field(default_factory=dict)
    length_mismatch_examples: list[LengthMismatch] = Field(default_factory=list)
    acceptance: Acceptance
    """The best acceptance the arm has: each request's figures when all carried them, else the
    counters' (or the estimate's) block, labelled by ``source``."""
    server_latency: ArmServerLatency | None = None
    """From the arm's own vLLM histograms (None: the tiered arm, or a run before schema 12)."""
    request_acceptance: ArmRequestAcceptance | None = None
    """From each measured request's own figures (None: no response of the arm carried any,
    e.g. a server without --per-request-spec-decode-metrics, the baseline, the tiered arm, or
    a run before schema 14)."""


class StatSpeedups(_Result):
    """SD vs baseline for one distribution, > 1 means SD is better."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class Speedups(_Result):
    """SD vs baseline (latency: base/SD; throughput: SD/base), > 1 means SD is better."""

    ttft_ms: StatSpeedups
    tpot_ms: StatSpeedups
    itl_ms: StatSpeedups
    chunk_gap_ms: StatSpeedups
    e2e_ms: StatSpeedups
    output_tokens_per_s: StatSpeedups
    output_throughput_tok_s: float | None = None
    request_throughput_rps: float | None = None
    goodput_rps: float | None = None

    def value(self, metric: str, stat: str = "mean") -> float | None:
        """The speedup of ``metric`` (``stat`` of a distribution; ignored for a rate)."""
        found = getattr(self, metric, None)
        if isinstance(found, StatSpeedups):
            stat_value: float | None = getattr(found, stat, None)
            return stat_value
        return found if isinstance(found, float) else None


class ServerComparison(_Result):
    """SD vs baseline from the two arms' vLLM histograms (latency: base/SD, > 1: SD better)."""

    source: LatencySource = LatencySource.SERVER_HISTOGRAMS
    interval_method: str
    """How the means' intervals were computed (the quantiles have none: see their buckets)."""
    overall: dict[str, dict[str, Interval]] = Field(default_factory=dict)
    """Metric (ttft_ms, tpot_ms, step_gap_ms, itl_ms) -> stat (mean, p50, p90, p99) ->
    speedup; empty when an arm has no server figure."""
    by_class: dict[str, dict[str, dict[str, Interval]]] = Field(default_factory=dict)
    """Classes with a server figure on both arms (ArmServerLatency.by_class)."""


class Comparison(_Result):
    """Speedups overall and per prompt class present on both arms (None: an arm is missing)."""

    overall: Speedups | None = None
    by_class: dict[str, Speedups] = Field(default_factory=dict)


class LosslessMismatch(_Result):
    prompt_id: str
    prompt_class: str
    first_diff_char: int
    first_diff_token: int
    """Position of the first divergence, counted on the baseline's stream (tokens before it
    agree)."""
    compared_tokens: int = 0
    """The baseline's output tokens: what the SD output was compared against."""
    agreement: float | None = None
    """first_diff_token / compared_tokens: the share of the output over the common prefix
    (None: nothing compared)."""
    baseline_token: str
    speculative_token: str
    baseline_context: str
    speculative_context: str


class Lossless(_Result):
    """At temperature 0, the SD arm's output must equal the baseline's, prompt by prompt."""

    applicable: bool
    """True at temperature 0 (otherwise outputs may differ legitimately)."""
    note: str | None = None
    prompts_compared: int
    exact_matches: int
    exact_match_rate: float | None = None
    tokens_compared: int = 0
    """The baseline's output tokens over the compared prompts."""
    prefix_agreement_rate: float | None = None
    """Tokens before each prompt's first divergence (all of them for an exact match) /
    tokens_compared: how much of the output SD reproduced, next to the all-or-nothing exact
    match. The guardrail alarm compares it with guardrails.lossless_min_prefix_agreement,
    since greedy outputs on Neuron can diverge late even between two baselines (vllm-neuron's
    DFlash bench notes)."""
    baseline_self_consistency: float | None = None
    """Share of repeated prompts whose baseline outputs all agree (batching determinism)."""
    mismatches: list[LosslessMismatch] = Field(default_factory=list)


class RequestInfo(_Result):
    """The request every arm sends (loadtest.client.RequestParams)."""

    model: str
    max_tokens: int
    temperature: float
    ignore_eos: bool
    seed: int
    api: str
    timeout_s: float
    class_header: str | None = None
    """Header carrying each request's prompt class, on every arm (None: older runs, none)."""


class LoadShapeInfo(_Result):
    concurrency: int
    request_rate: float | None = None
    """None: closed loop (or a trace)."""
    max_duration_s: float
    """Time bound of one arm."""
    traffic_file: str | None = None
    """The traffic file replayed (loadtest.traffic.file); None: the prompt suite."""
    time_scale: float | None = None
    """Its recorded offsets were multiplied by this (None: no trace)."""
    burst_writes: bool = False
    """A trace's requests due at one offset were written together (loadtest.traffic.
    burst_writes); False: each by its own sender, or no trace."""


class SloInfo(_Result):
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float


class RunInfo(_Result):
    """What was run: run.json of the run directory."""

    started_at: str
    """UTC, ISO 8601."""
    model: str
    served_models: str | None = None
    """What the servers really serve when ``model`` is only the name requests carry (the
    local run serves generated miniatures under the target's name); None: ``model`` itself."""
    urls: dict[str, str]
    variant_labels: dict[str, str]
    request: RequestInfo
    load_shape: LoadShapeInfo
    max_duration_s: float | None = None
    """Time bound of the whole comparison (both arms)."""
    measured_requests: int
    warmup_requests: int
    seed: int
    prompt_files: list[str] = Field(default_factory=list)
    slo: SloInfo
    overrides: dict[str, Any] = Field(default_factory=dict)
    loadtest_config: dict[str, Any] = Field(default_factory=dict)
    analysis: AnalysisInfo | None = None
    """k, bootstrap settings and price for the statistics and cost (None: older runs)."""
    arms_mode: str | None = None
    """loadtest.arms_mode of the run: concurrent, alternating or sequential (None: older runs,
    sequential)."""
    tiered: TieredRouting | None = None
    """The routing of the tiered arm; None: the run did not drive the gateway."""


class TieredRouting(_Result):
    """How the tiered arm's gateway routed (the run's ``routing`` section): written to
    run.json so the summary knows which arm each class should match."""

    class_header: str
    speculative_classes: list[str]
    """Classes the gateway sends to the speculative arm; every other class to the baseline."""


class CloudWatchResult(_Result):
    """What publishing to CloudWatch did (never raised: recorded here)."""

    published: bool
    reason: str | None = None
    namespace: str | None = None
    datums: int | None = None
    calls: int | None = None


class Interval(_Result):
    """A point estimate, its paired bootstrap interval and the number of pairs behind it."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    """Pairs (schedule indices that succeeded on both arms) behind the figure."""
    confidence: float
    null_value: float | None = 1.0
    """The value meaning "no difference" (1 for a ratio); None: not a comparison."""
    significant: bool | None = None
    """The interval excludes null_value; None when that question does not apply. Derived."""

    @model_validator(mode="after")
    def _significance(self) -> Interval:
        if self.null_value is None:
            significant = None
        elif self.low is None or self.high is None:
            significant = False
        else:
            significant = self.low > self.null_value or self.high < self.null_value
        # Derived, never trusted from input: a stored summary re-derives it.
        object.__setattr__(self, "significant", significant)
        return self


class StepCosts(_Result):
    """One class's inputs to the speedup model, measured in the run (loadtest.expected)."""

    baseline_step_ms: float
    """The baseline's time per decode step (one token), after the first token."""
    speculative_step_ms: float
    """The speculative arm's time per target step: its k drafts plus the verify."""
    tokens_per_step: float
    """tau: tokens per target step, from vLLM's counters, the class probed alone."""
    baseline_ttft_ms: float
    speculative_ttft_ms: float
    output_tokens: float
    """Mean output tokens per request."""

    draft_cost_per_step_ms: float | None = None
    """What speculating adds to a step (the drafts and the wider verify). Derived."""
    step_ratio: float | None = None
    """A speculative step's price in plain steps: the host's part of the speedup. Derived."""

    @model_validator(mode="after")
    def _derived(self) -> StepCosts:
        # Derived, never trusted from input (as Interval.significant).
        object.__setattr__(
            self, "draft_cost_per_step_ms", self.speculative_step_ms - self.baseline_step_ms
        )
        object.__setattr__(self, "step_ratio", self.speculative_step_ms / self.baseline_step_ms)
        return self


class HostExpectation(_Result):
    """What a class's step costs predict for its E2E speedup, next to what was measured."""

    prompt_class: str
    costs: StepCosts
    predicted_e2e_speedup: Interval
    measured_e2e_speedup: Interval

    agrees: bool | None = None
    """The measured estimate lies inside the predicted interval (None: no interval). Derived."""

    # Issue 40 (predictions that could be wrong): the prediction made before the load.
    calibration: StepCosts | None = None
    """Step costs measured before the load by a few single-stream requests per arm
    (loadtest.expected.calibrate); None: not calibrated (a run from before issue 40)."""
    predicted_before_load: float | None = None
    """The E2E speedup those costs predict (None: not calibrated)."""
    prediction_holds: bool | None = None
    """predicted_before_load lies inside the measured interval (False: the prediction
    missed; None: nothing to compare). Derived."""

    @model_validator(mode="after")
    def _agreement(self) -> HostExpectation:
        predicted, measured = self.predicted_e2e_speedup, self.measured_e2e_speedup
        agrees = None
        if None not in (predicted.low, predicted.high, measured.estimate):
            agrees = predicted.low <= measured.estimate <= predicted.high  # type: ignore[operator]
        object.__setattr__(self, "agrees", agrees)
        before, holds = self.predicted_before_load, None
        if before is not None and measured.low is not None and measured.high is not None:
            holds = measured.low <= before <= measured.high
        object.__setattr__(self, "prediction_holds", holds)
        return self


class _InMemory:
    """A value a result carries in memory beside its fields (issue 40): never serialized, and
    no part of the result's value, so it compares equal to any other (or to none): two results
    are equal by their fields alone."""

    __slots__ = ("value",)
    __hash__ = None  # type: ignore[assignment]  # mutable-style equality: not hashable

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, _InMemory)


class ScopeStatistics(_Result):
    """Paired statistics of one scope (all requests, or one prompt class)."""

    pairs: int
    speedup: dict[str, dict[str, Interval]]
    """Metric -> stat (mean, p50, p90, p99) -> SD vs baseline, > 1 means SD is better."""
    busy_rate_ratio: Interval
    """SD / baseline output tokens per busy second (sum tokens / sum E2E)."""
    acceptance_rate_estimate: Interval
    """Client-side acceptance estimate of the SD arm (loadtest.stats)."""

    # Issue 40 (multiple comparisons): the busy-rate ratio's bootstrap replicates, in memory
    # only (never serialized), for the per-bucket verdicts' Holm correction (loadtest.verdict).
    _busy_rate_replicates: _InMemory | None = PrivateAttr(default=None)

    @property
    def busy_rate_replicates(self) -> Any:
        """The replicates busy_rate_ratio's interval was read from (None: not computed here,
        e.g. a summary read back from JSON)."""
        kept = self._busy_rate_replicates
        return None if kept is None else kept.value

    @busy_rate_replicates.setter
    def busy_rate_replicates(self, replicates: Any) -> None:
        self._busy_rate_replicates = _InMemory(replicates)


class PairedStatistics(_Result):
    """Paired bootstrap over schedule indices (loadtest.stats), overall and per class."""

    confidence: float
    resamples: int
    seed: int
    unpaired: int
    """Measured schedule indices that failed or are missing on either arm."""
    overall: ScopeStatistics
    by_class: dict[str, ScopeStatistics] = Field(default_factory=dict)
    by_bucket: dict[str, dict[str, ScopeStatistics]] = Field(default_factory=dict)
    """A replayed trace: class -> input-length bucket -> its statistics (empty: no trace)."""


class PriceBasis(_Result):
    """What one arm pays per hour and where the price came from (config.pricing)."""

    target: str
    """trn2 (the deployment) or local (the CPU machine of make local)."""
    instance_type: str
    capacity_type: str
    """on-demand, capacity-block, reservation, or local."""
    instance_usd_per_hour: float
    devices_claimed: int
    devices_per_instance: int
    source: str
    as_of: str
    nominal: bool
    """A placeholder price, not a quote: cost figures are labelled nominal."""
    arm_usd_per_hour: float = 0.0
    """instance_usd_per_hour x devices_claimed / devices_per_instance. Derived."""

    @model_validator(mode="after")
    def _arm_price(self) -> PriceBasis:
        share = self.devices_claimed / self.devices_per_instance
        object.__setattr__(self, "arm_usd_per_hour", self.instance_usd_per_hour * share)
        return self


class ScopeCost(_Result):
    """Cost per 1M output tokens of each arm in one scope, and SD / baseline with its CI."""

    usd_per_million_output_tokens: dict[str, float | None]
    """Arm -> USD per 1M output tokens at the measured load (None: no tokens)."""
    output_tokens: dict[str, int]
    busy_share: dict[str, float | None]
    """The scope's share of the arm's busy time (sum of E2E)."""
    ratio: Interval
    """SD cost / baseline cost: < 1 means SD is cheaper."""


class OptimalLoadCost(_Result):
    """Cost at the concurrency with the highest measured throughput of a sweep."""

    concurrency: int
    output_throughput_tok_s: float
    usd_per_million_output_tokens: float | None


class CostSummary(_Result):
    """Cost per 1M output tokens (loadtest.cost)."""

    basis: PriceBasis
    overall: ScopeCost
    by_class: dict[str, ScopeCost] = Field(default_factory=dict)
    by_bucket: dict[str, dict[str, ScopeCost]] = Field(default_factory=dict)
    """A replayed trace: class -> input-length bucket -> its cost (empty: no trace)."""
    at_optimal_load: dict[str, OptimalLoadCost] | None = None
    """Arm -> cost at its throughput-optimal concurrency; None without a sweep."""
    optimal_load_note: str | None = None


class Decision(StrEnum):
    USE_SD = "use SD"
    DONT = "don't"
    NO_GAIN = "no gain"
    """The cost ratio's interval lies inside the equivalence margin: keep the baseline."""
    CANT_TELL = "can't tell"

    @property
    def routes_to_sd(self) -> bool:
        """Only "use SD" sends the class to the speculative arm; every other outcome (a
        "no gain" too) keeps it on the baseline."""
        return self is Decision.USE_SD


class ClassVerdict(_Result):
    """Use SD for a prompt class or not, from the intervals (loadtest.verdict)."""

    prompt_class: str
    """A prompt class, or "all"."""
    decision: Decision
    reason: str
    pairs: int
    cost_ratio: Interval
    """SD / baseline cost per 1M output tokens: < 1 is cheaper."""
    e2e_speedup: Interval | None = None
    """Baseline / SD mean E2E: > 1 is faster."""
    acceptance_rate_estimate: Interval | None = None
    lossless_mismatches: int = 0
    input_bucket: str | None = None
    """A replayed trace's input-length bucket of this row (None: the whole class)."""
    equivalence_bounds: tuple[float, float] | None = None
    """[1/(1+m), 1+m] for statistics.equivalence_margin m: a cost ratio interval inside them
    is "no gain" (None: a summary from before schema 9)."""
    # Issue 40 (multiple comparisons), schema 13: a replayed trace's cells only.
    p_value: float | None = None
    """The cell's two-sided paired-bootstrap p-value for a cost ratio of 1 (loadtest.stats
    bootstrap_p_value; None: a whole-class row, or a cell outside the family)."""
    adjusted_p_value: float | None = None
    """Its Holm-adjusted p-value over the run's cells: the cell decides at family-wise level
    alpha only when this is <= alpha (loadtest.verdict)."""


class AnalysisInfo(_Result):
    """What the statistics and cost of a run need beyond its records (written to run.json)."""

    num_speculative_tokens: int
    lossless_min_prefix_agreement: float = 1.0
    """A lossless mismatch decides "don't" for its class when SD diverged before this share
    of the prompt's output: 1.0 (any mismatch) locally, guardrails.lossless_min_prefix_agreement
    on Neuron."""
    statistics: StatisticsConfig
    """The run's config.statistics, as it was: the one copy of the bootstrap settings."""
    price: PriceBasis
    pairs_setting: str | None = None
    """The -c key that multiplies the run's pairs (requests per prompt); None: older runs."""
    requests_per_prompt: int | None = None
    """Its value in this run."""
    pilot_floor_factor: float = LiveGuardrailConfig.model_fields["pilot_floor_factor"].default
    """guardrails.live.pilot_floor_factor of the run: the proposed acceptance floors are this
    times the lower bound of each routed class's acceptance (older runs: the default)."""
    speculation_schedule: list[tuple[int, int, int]] | None = None
    """The speculative arm's k per batch-size range ([first, last, k], serving.
    speculation_schedule, vLLM's num_speculative_tokens_per_batch_size); None: one k for
    every batch (num_speculative_tokens)."""
    length_buckets: list[int] | None = None
    """A replayed trace: the input-length bucket edges of the run (loadtest.traffic.
    length_buckets; `python -m loadtest report RUN_DIR -c loadtest.traffic.length_buckets=[..]`
    rebuckets the recorded input tokens); None: no trace."""

    @model_validator(mode="before")
    @classmethod
    def _flat_settings_of_older_runs(cls, data: Any) -> Any:
        # Schema 4 wrote the settings flat next to the price; read them into the section.
        if isinstance(data, dict) and "statistics" not in data:
            flat = {k: data[k] for k in StatisticsConfig.model_fields if k in data}
            rest = {k: v for k, v in data.items() if k not in flat}
            return {**rest, "statistics": flat}
        return data


class ClassFloor(_Result):
    """The acceptance floor the pilot supports for one class the verdict routes to SD."""

    prompt_class: str
    acceptance: Interval | None
    """The class's acceptance with its interval: accepted / drafted tokens from its requests'
    own figures, bootstrap over requests, when the SD arm's source is "per request"
    (loadtest.stats.request_acceptance_interval); else from its tokens per chunk, paired
    bootstrap (statistics.by_class.*.acceptance_rate_estimate)."""
    acceptance_source: AcceptanceSource = AcceptanceSource.ESTIMATED
    """Where ``acceptance`` comes from: "per request" or "estimated" (tokens per chunk)."""
    floor: float | None
    """factor x acceptance.low, rounded down to FLOOR_DECIMALS (never above the product);
    None: no floor, see ``reason``."""
    reason: str | None = None
    """Why there is no floor (None when there is one)."""


class PilotFloors(_Result):
    """The guardrail floors the run supports for the classes its verdict routes to SD
    (loadtest.verdict.pilot_floors): printed next to the routing line as
    ``-c experiment.routing.acceptance_floors.<class>=<floor>``."""

    factor: float
    """guardrails.live.pilot_floor_factor of the run."""
    source: AcceptanceSource
    """The SD arm's acceptance source: floors only when its server measured it (each
    request's figures or its counters)."""
    measured_acceptance_rate: float | None = None
    """The SD arm's acceptance from its server over the whole (mixed-class) window, for
    comparison with the per-class figures; None unless measured."""
    by_class: list[ClassFloor] = Field(default_factory=list)
    """One entry per routed class, in verdict order (empty: the verdict routes none)."""

    def floors(self) -> dict[str, float]:
        """Class -> floor, for the classes that have one."""
        return {c.prompt_class: c.floor for c in self.by_class if c.floor is not None}


class ArmsTiming(_Result):
    """When the arms ran (loadtest/arms.py): how close concurrent arms started and the wall
    time they saved against running one after the other."""

    mode: str
    """concurrent, alternating or sequential (loadtest.arms_mode)."""
    first_request_wall: dict[str, float | None]
    """Per arm: when its first measured request left (Unix time; None: none did)."""
    start_spread_s: float | None
    """Seconds between the arms' first measured requests (None: an arm sent none)."""
    arms_elapsed_s: dict[str, float]
    """Per arm: its Locust processes' wall time, start-up and shutdown included."""
    run_elapsed_s: float
    """Wall time from the first arm's launch to the last arm's end."""
    wall_saved_s: float
    """Sum of the arms' elapsed minus the run's: about one arm's time when concurrent, 0
    when sequential or alternating."""
    block_order: list[str] = Field(default_factory=list)
    """Alternating: the arm of each block in the order the blocks ran (ABBA...; empty for
    the other modes)."""
    block_requests: int | None = None
    """Alternating: measured requests per block (loadtest.alternating_block_requests)."""
    block_overhead_s: float | None = None
    """Alternating: the blocks' elapsed minus their measured windows, over every arm: what
    starting and stopping one Locust process per block cost."""


class TieredClass(_Result):
    """The tiered arm in one prompt class against both serving arms (loadtest/tiered.py)."""

    prompt_class: str
    routed_to: str
    """The serving arm the gateway sends this class to (speculative or baseline): the one
    the tiered arm must match."""
    vs_baseline: Interval
    """Baseline / tiered mean E2E, paired on the same prompt: > 1 means tiered is faster."""
    vs_speculative: Interval
    """SD / tiered mean E2E, paired on the same prompt: > 1 means tiered is faster."""
    speculative_vs_baseline: Interval | None = None
    """SD's own E2E speedup over the baseline in this class (the statistics block)."""
    held: bool | None
    """Tiered matches the arm it is routed to, within the intervals: on a speculative class
    its speedup over the baseline lies within SD's interval; on the others its interval
    contains 1 (the baseline's). None: an interval is missing (too few pairs)."""
    reason: str


class GatewayCost(_Result):
    """What the gateway itself cost while the tiered arm ran, from the gateway's own process
    and statistics (the local run's Envoy, local_run/gateway.py): so a tiered figure that
    differs from its arm can be told apart from routing."""

    requests: int
    """Requests the gateway completed during the tiered arm (warm-up included)."""
    cpu_s: float
    """The gateway process's CPU seconds (user + system) during the tiered arm."""
    cpu_ms_per_request: float | None
    """cpu_s per request, in ms (None: no request)."""
    downstream_mean_ms: float | None
    """Mean time from the client's request to the gateway's last response byte."""
    upstream_mean_ms: float | None
    """Mean time of the gateway's attempts on the servers, over every cluster."""
    added_ms_per_request: float | None
    """downstream_mean_ms - upstream_mean_ms: what the gateway added to a request's latency
    (None: a mean is missing)."""
    gateway_cores: list[int]
    """The cores the gateway process may run on (its CPU affinity)."""
    server_cores: dict[str, list[int]]
    """Per serving arm, the cores its server process may run on."""
    machine_cores: list[int]
    """The cores the run itself may use."""
    cpu_binding: str | None = None
    """local.cpu_binding of the servers (apart, isolated or shared)."""
    source: str = ""
    """Where the figures come from."""

    def shared_with(self) -> list[str]:
        """The servers the gateway shares a core with."""
        mine = set(self.gateway_cores)
        return [arm for arm, cores in self.server_cores.items() if mine & set(cores)]

    def must_share(self) -> bool:
        """No core of the run is free of every server: wherever the gateway runs, it shares
        (on 2 cores with a core per server, always)."""
        held = {core for cores in self.server_cores.values() for core in cores}
        return set(self.machine_cores) <= held


class TieredComparison(_Result):
    """The tiered arm (the gateway routing each class) against both serving arms."""

    routing: TieredRouting
    by_class: dict[str, TieredClass] = Field(default_factory=dict)
    lossless: Lossless
    """The tiered arm's outputs against the baseline's, like the SD arm's."""
    unpaired: int
    """Measured schedule indices that failed or are missing on the tiered arm or the
    baseline."""
    gateway: GatewayCost | None = None
    """The gateway's own cost during the tiered arm; None: not measured."""


class RunSummary(_Result):
    """The whole summary of a run: summary.json."""

    schema_version: int = SCHEMA_VERSION
    run: RunInfo
    arms: dict[str, ArmSummary]
    """Keyed by Arm value, baseline first; "tiered" last when the run drove the gateway."""
    speedup: Comparison = Field(default_factory=Comparison)
    lossless: Lossless
    warnings: list[str] = Field(default_factory=list)
    cancelled_by: str | None = None
    """SIGINT or SIGTERM when the run was cancelled: a partial run (None: ran to its end)."""
    cloudwatch: CloudWatchResult | None = None
    """None: not published from this run."""
    statistics: PairedStatistics | None = None
    """Paired bootstrap intervals; None for runs without run.json "analysis" or pairs."""
    cost: CostSummary | None = None
    """Cost per 1M output tokens; None for runs without run.json "analysis"."""
    verdict: list[ClassVerdict] = Field(default_factory=list)
    """Per prompt class then "all": use SD / don't / no gain / can't tell."""
    verdict_by_bucket: list[ClassVerdict] = Field(default_factory=list)
    """A replayed trace: per prompt class and input-length bucket (empty: no trace)."""
    bucket_flips: list[str] = Field(default_factory=list)
    """Classes whose verdict differs across input-length buckets, each with how."""
    arms_timing: ArmsTiming | None = None
    """When the arms ran; None for runs from before loadtest.arms_mode."""
    tiered: TieredComparison | None = None
    """The tiered arm per class against both serving arms; None: the run did not drive it."""
    floors: PilotFloors | None = None
    """The acceptance floors the run supports for the classes its verdict routes to SD; None:
    no per-class verdict (or a run from before schema 7 whose summary was not rebuilt)."""
    server_speedup: ServerComparison | None = None
    """SD vs baseline from the arms' own vLLM histograms; None: an arm has none."""
    per_token_source: LatencySource = LatencySource.CLIENT_STREAM
    """Where the headline TTFT and TPOT speedups come from: the client stream while both arms'
    chunks arrive smoothly, the server histograms when an arm's chunks arrived in bursts."""
    per_token_source_reason: str | None = None
    """Why that source (None: the client stream of a smooth run)."""

    def arm(self, arm: Arm | str) -> ArmSummary:
        return self.arms[str(arm)]

    def speedup_of(
        self, metric: str = "e2e_ms", stat: str = "mean", prompt_class: str | None = None
    ) -> float | None:
        """SD vs baseline for ``metric``; None when not computable."""
        by_class = self.speedup.by_class
        block = self.speedup.overall if prompt_class is None else by_class.get(prompt_class)
        return None if block is None else block.value(metric, stat)


def summary_json_schema() -> dict[str, Any]:
    """The JSON Schema of summary.json, generated from the model."""
    schema = RunSummary.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
