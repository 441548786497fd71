"""The typed result of a sweep: what ``python -m tune`` writes as tune.json.

tune.json is ``TuneResult.model_dump_json()``; its JSON Schema is generated from these
models (``python -m tune schema``), published as docs/schemas/tune.schema.json next to the
run summary's. Units are in the field names (``_s``, ``_ms``). Renderers (Markdown report,
plots, the ``-c`` line) read these models, never the JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from experiment.config.local import Drafter
from experiment.config.models import KNOWN_MODELS, ModelKind
from loadtest.results import Interval, OptimalLoadCost, PriceBasis

# 3: FitInput.acceptance_source (issue 23); 4: the drafter comparison (ClassModel.drafter and
# .steps, TuneResult.drafter_choices); 5: the speculation schedule (TuneResult.schedule)
SCHEMA_VERSION = 5
# The candidate name of the local EAGLE3 head (local.drafter's value): drafts are named by
# local.generator.drafts, which may not hold this name (LocalConfig._no_draft_named_eagle3).
EAGLE3_CANDIDATE = "eagle3"
Role = Literal["baseline", "fit", "holdout", "break_even"]
AcceptanceSource = Literal["counters", "client_chunks"]
# How tau(k) was predicted: replaying the largest fit k's chunks (the default), or summing
# per-position rates (when those chunks cannot be replayed).
TauSource = Literal["trace_replay", "per_position_rates"]


def drafter_of(draft: str) -> Drafter:
    """The drafter a candidate drafts with: the local EAGLE3 head or a known EAGLE3 model
    (experiment/config/models.py), else a draft model."""
    known = KNOWN_MODELS.get(draft)
    if draft == EAGLE3_CANDIDATE or (known is not None and known.kind == ModelKind.EAGLE3):
        return "eagle3"
    return "draft-model"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Setting(_Result):
    """One serving configuration: no draft (the baseline) or a draft with window k."""

    draft: str | None = None
    k: int = 0

    @property
    def label(self) -> str:
        return "baseline" if self.draft is None else f"{self.draft} k={self.k}"


class RequestSample(_Result):
    """One request as the client saw it (chunk times are offsets from the request start)."""

    prompt_id: str
    repeat: int
    ok: bool
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int | None = None
    chunk_tokens: list[int] = Field(default_factory=list)
    chunk_times_s: list[float] = Field(default_factory=list)

    @property
    def decode_steps(self) -> int:
        return max(len(self.chunk_times_s) - 1, 0)

    @property
    def step_s(self) -> float | None:
        """Mean time of one target step after the first token (one chunk per step)."""
        if self.decode_steps < 1:
            return None
        return (self.chunk_times_s[-1] - self.chunk_times_s[0]) / self.decode_steps


class Acceptance(_Result):
    """Per-position acceptance r_i = P(at least i drafts accepted in a step), i = 1..k."""

    source: AcceptanceSource
    per_position_rate: list[float]
    acceptance_rate: float | None = None
    steps: float | None = None  # drafts counted (counters) or full steps seen (client)


class ClassRun(_Result):
    prompt_class: str
    samples: list[RequestSample]
    acceptance: Acceptance | None = None
    acceptance_note: str | None = None  # why acceptance is missing or came from the client

    @property
    def ok_samples(self) -> list[RequestSample]:
        return [s for s in self.samples if s.ok]

    @property
    def failed(self) -> int:
        return sum(not s.ok for s in self.samples)


class Run(_Result):
    """One server measured at one concurrency."""

    setting: Setting
    role: Role
    concurrency: int
    classes: dict[str, ClassRun]
    server_ready_s: float | None = None
    wall_s: float
    skipped_requests: int = 0  # not sent: the sweep's budget ran out
    load_average_1m: float | None = None  # of the machine when the measurement started


class StepCostFit(_Result):
    baseline_step_ms: float
    intercept_ms: float
    per_k_ms: float
    fit_k: list[int]

    @property
    def fixed_overhead_ms(self) -> float:
        return self.intercept_ms - self.baseline_step_ms


class KPrediction(_Result):
    k: int
    tokens_per_step: float
    step_ms: float
    per_token_ms: float
    e2e_speedup: float
    extrapolated: bool


class MeasuredSpeedup(_Result):
    """mean(E2E baseline) / mean(E2E SD), paired by prompt, with the load test's paired
    bootstrap interval (loadtest.stats) and its n."""

    k: int
    role: Role
    e2e_speedup: Interval
    tokens_per_step: float | None = None

    @property
    def point(self) -> float:
        # measured_speedup() never builds one without an estimate
        assert self.e2e_speedup.estimate is not None
        return self.e2e_speedup.estimate

    @property
    def n(self) -> int:
        return self.e2e_speedup.n


class MeasuredStep(_Result):
    """What one speculative step cost at window k, measured: the class's median per-request
    step time at concurrency 1 next to the baseline's (same class, same prompts)."""

    k: int
    role: Role
    step_ms: float
    baseline_step_ms: float

    @property
    def relative(self) -> float:
        """SD step / baseline step: 1 + what drafting and the wider verify add per step."""
        return self.step_ms / self.baseline_step_ms

    @property
    def draft_cost_ms(self) -> float:
        return self.step_ms - self.baseline_step_ms


class ClassModel(_Result):
    """The fitted model of one (draft, prompt class): predictions for every k and the
    measured points next to them."""

    draft: str
    drafter: Drafter = "draft-model"
    prompt_class: str
    acceptance: Acceptance
    acceptance_from_k: int
    tokens_per_step_source: TauSource = "per_position_rates"
    step_cost: StepCostFit
    output_tokens: float
    ttft_ms: float
    baseline_ttft_ms: float
    predictions: list[KPrediction]
    measured: list[MeasuredSpeedup]
    steps: list[MeasuredStep] = Field(default_factory=list)  # every k measured at c=1

    def prediction(self, k: int) -> KPrediction:
        return next(p for p in self.predictions if p.k == k)


ComponentName = Literal["tokens_per_step", "step_ms", "per_token_ms", "ttft_ms", "baseline_step_ms"]


class Component(_Result):
    """One factor of a held-out prediction next to what the held-out run itself measured:
    tells which part of the model (acceptance, step cost, TTFT, baseline) an error comes
    from."""

    name: ComponentName
    predicted: float
    measured: float | None
    source: str  # how the measured value was obtained
    relative_error: float | None  # (predicted - measured) / measured


class Check(_Result):
    """A held-out k: predicted without its data, then measured."""

    draft: str
    prompt_class: str
    k: int
    predicted_speedup: float
    measured: MeasuredSpeedup
    relative_error: float
    within_tolerance: bool
    components: list[Component] = Field(default_factory=list)


class Recommendation(_Result):
    scope: str  # a prompt class, or "all" (loadtest.metrics.ALL_CLASSES)
    draft: str
    k: int
    predicted_speedup: float
    measured: MeasuredSpeedup | None = None  # when that (draft, k) was measured
    best_measured_k: int | None = None
    within_one_step: bool | None = None  # of the best measured k (measured grid neighbours)


class DrafterChoice(_Result):
    """One drafter (and draft, k) per scope (a prompt class, or all of them) and by how much
    it beats the best candidate of another drafter (of another draft when one drafter was
    swept): predicted, and measured head to head on the same prompts."""

    scope: str
    drafter: Drafter
    draft: str
    k: int
    predicted_speedup: float  # over the baseline
    runner_up_drafter: Drafter | None = None  # None: nothing else was fitted
    runner_up_draft: str | None = None
    runner_up_k: int | None = None
    runner_up_predicted_speedup: float | None = None
    # The measured points compared head to head: each candidate's own k when it was measured,
    # else its best measured k.
    measured_k: int | None = None
    runner_up_measured_k: int | None = None
    # mean(E2E runner-up) / mean(E2E winner), paired by (prompt, repeat) with the load test's
    # paired bootstrap; above 1: the winner is faster. None: either side was never measured.
    margin: Interval | None = None
    overrides: str  # the -c line that applies this choice

    @property
    def predicted_margin(self) -> float | None:
        if self.runner_up_predicted_speedup is None:
            return None
        return self.predicted_speedup / self.runner_up_predicted_speedup


class BreakEven(_Result):
    """SD vs baseline by concurrency for the recommended setting, one prompt class."""

    prompt_class: str
    setting: Setting
    points: list[tuple[int, MeasuredSpeedup]]
    # Concurrency above which SD stops paying (interpolated between levels); None: it pays
    # at every level measured; 0: at none.
    break_even_concurrency: float | None
    max_num_seqs: int


class LoadCost(_Result):
    """One arm at one concurrency level: output throughput over the measured window and what
    1M output tokens cost at it (loadtest.cost.usd_per_million)."""

    concurrency: int
    output_tokens: int
    wall_s: float
    output_throughput_tok_s: float | None
    usd_per_million_output_tokens: float | None


class ArmCost(_Result):
    setting: Setting
    points: list[LoadCost]
    optimal: OptimalLoadCost | None  # the level with the highest output throughput


class CostAtLoad(_Result):
    """Cost per 1M output tokens of the baseline and the recommended setting at every
    concurrency level of the break-even sweep, and each arm's throughput-optimal level."""

    basis: PriceBasis
    arms: list[ArmCost]


class LevelStepCost(_Result):
    """Step costs at one batch size (the concurrency of a closed-loop run: that many sequences
    batched), one prompt class: the baseline arm's plain target step, and the speculative
    arm's step as the line T(k) = intercept + per_k * k through the fit k measured there
    (per_k: one more drafted token, the draft forward plus the wider verify)."""

    batch_size: int
    prompt_class: str
    baseline_step_ms: float
    intercept_ms: float
    per_k_ms: float
    fit_k: list[int]
    ttft_ms: float  # speculative arm, mean over the fit runs at this batch size
    baseline_ttft_ms: float


class BatchPrediction(_Result):
    """The workload (classes weighted by their request counts) at one batch size and window
    k: predicted E2E speedup over the baseline at the same batch size, with a bootstrap
    interval over requests, and the predicted output throughput of a server kept at that
    batch size."""

    batch_size: int
    k: int
    e2e_speedup: Interval
    output_throughput_tok_s: float
    baseline_output_throughput_tok_s: float
    measured: bool  # step costs measured at this batch size (else interpolated or held)


class ScheduleRange(_Result):
    """One [first, last, k] range of the schedule and why: the chosen k's predicted speedup
    at the range's weakest batch size (k = 0 priced as vLLM serves it: the drafter's forward
    still runs each step, tune/schedule.py)."""

    first: int
    last: int
    k: int
    at_batch_size: int
    best_k: int  # the k > 0 with the highest prediction at at_batch_size (k itself when k > 0)
    predicted_speedup: Interval  # of k at at_batch_size; at most 1: no k pays there
    measured_batch_sizes: list[int]


class SpeculationSchedule(_Result):
    """A k per batch-size range for serving.speculation_schedule (vLLM's Dynamic SD), derived
    from step costs measured at a few batch sizes and the draft's per-position acceptance."""

    draft: str
    drafter: Drafter
    batch_sizes: list[int]  # measured
    max_num_seqs: int
    max_k: int  # the largest k considered: acceptance measured up to it
    step_costs: list[LevelStepCost]
    predictions: list[BatchPrediction]
    ranges: list[ScheduleRange]
    overrides: str | None  # the -c line that deploys it; None where the engine cannot

    @property
    def entries(self) -> list[list[int]]:
        return [[r.first, r.last, r.k] for r in self.ranges]


class Trn2Plan(_Result):
    candidates: list[Setting]
    compiles: int
    already_compiled: int
    node_hours: float
    arms_per_node: int
    usd_per_hour: float
    price_source: str
    price_nominal: bool
    cost_usd: float
    predicted_k: list[int]


class LocalPlan(_Result):
    runs: list[tuple[Setting, Role, list[int]]]  # setting, role, concurrency levels
    server_starts: int
    requests: int
    estimated_s: float
    budget_s: float
    predicted_k: list[int]


class FitInput(_Result):
    """One arm of a load-test run directory that ``python -m tune fit`` used."""

    run_dir: str  # the directory's name
    setting: Setting
    role: Role
    concurrency: int
    # The SD arm's acceptance source in that run (loadtest.results.AcceptanceSource: measured,
    # estimated, not available); None for the baseline input.
    acceptance_source: str | None = None


class TuneResult(_Result):
    """tune.json."""

    schema_version: int = SCHEMA_VERSION
    target: Literal["local", "trn2"]
    tolerance: float
    plan: LocalPlan | Trn2Plan | None  # None: fitted from load-test run directories
    inputs: list[FitInput] = Field(default_factory=list)  # python -m tune fit: what was read
    runs: list[Run] = Field(default_factory=list)
    models: list[ClassModel] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    recommendations: list[Recommendation] = Field(default_factory=list)
    drafter_choices: list[DrafterChoice] = Field(default_factory=list)
    break_even: list[BreakEven] = Field(default_factory=list)
    cost: CostAtLoad | None = None  # None: no concurrency sweep
    schedule: SpeculationSchedule | None = None  # None: fewer than two fit k above c=1
    overrides: str | None = None  # the recommendation as one line of -c overrides
    notes: list[str] = Field(default_factory=list)
    load_average: list[float] = Field(default_factory=list)  # 1/5/15 min, at the end
    elapsed_s: float = 0.0


def tune_json_schema() -> dict[str, Any]:
    """The JSON Schema of tune.json, generated from the model."""
    schema = TuneResult.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
