"""Cost per 1M output tokens of each arm, overall and per prompt class.

An arm pays for its share of the instance (devices it claims / devices of the instance) for
as long as it serves: cost per token = arm price per second x window / output tokens, i.e.
price / measured output throughput. A prompt class is charged the share of the arm's busy
time its requests took (sum of their E2E over the arm's): with concurrent requests the
window is shared, and a class whose requests last longer pays for more of it. Prices come
from ``config.pricing`` (no lookup at run time); a nominal price is labelled as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from experiment.config import Arm, ExperimentConfig
from loadtest.records import RequestRecord
from loadtest.results import CostSummary, Interval, OptimalLoadCost, PriceBasis, ScopeCost
from loadtest.traffic import record_bucket

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_UNIT = 1_000_000
LOCAL_CAPACITY = "local"


def price_basis(config: ExperimentConfig, *, local: bool) -> PriceBasis:
    """The price one arm pays: the local CPU machine (whole) or its share of the trn2 node."""
    if local:
        machine = config.pricing.local
        return PriceBasis(
            target="local",
            instance_type=machine.instance_type,
            capacity_type=LOCAL_CAPACITY,
            instance_usd_per_hour=machine.usd_per_hour,
            # Each local arm has the machine to itself while it is measured (arms run in turn).
            devices_claimed=1,
            devices_per_instance=1,
            source=machine.source,
            as_of=machine.as_of.isoformat(),
            nominal=machine.nominal,
        )
    nodes = config.cluster.neuron_nodes
    price = config.pricing.neuron[nodes.capacity_type]
    return PriceBasis(
        target="trn2",
        instance_type=nodes.instance_type,
        capacity_type=nodes.capacity_type.value,
        instance_usd_per_hour=price.usd_per_hour,
        devices_claimed=config.serving.neuron_devices * config.serving.replicas,
        devices_per_instance=nodes.devices,
        source=price.source,
        as_of=price.as_of.isoformat(),
        nominal=price.nominal,
    )


def usd_per_million(arm_usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """Cost of 1M output tokens at a throughput (None: no throughput)."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return arm_usd_per_hour / SECONDS_PER_HOUR / tokens_per_s * TOKENS_PER_UNIT


def margin_usd(baseline_usd: float, margin: float) -> tuple[float, float]:
    """(less, more): how far below and above the baseline's ``baseline_usd`` per 1M output
    tokens SD's cost may lie and still be inside the equivalence bounds [1/(1+m), 1+m] of
    ``statistics.equivalence_margin`` m (loadtest.verdict): at most ``baseline_usd x m``
    either way."""
    return baseline_usd * margin / (1 + margin), baseline_usd * margin


def optimal_load(
    throughput_by_concurrency: Mapping[int, float | None], arm_usd_per_hour: float
) -> OptimalLoadCost | None:
    """The sweep point with the highest output throughput, and its cost per 1M tokens."""
    measured = {c: t for c, t in throughput_by_concurrency.items() if t}
    if not measured:
        return None
    concurrency = max(measured, key=lambda c: (measured[c], -c))  # ties: fewer users
    throughput = measured[concurrency]
    return OptimalLoadCost(
        concurrency=concurrency,
        output_throughput_tok_s=throughput,
        usd_per_million_output_tokens=usd_per_million(arm_usd_per_hour, throughput),
    )


def _busy_s(records: Iterable[RequestRecord]) -> float:
    return sum(r.e2e_s or 0.0 for r in records)


def _tokens(records: Iterable[RequestRecord]) -> int:
    return sum(r.output_tokens or 0 for r in records if r.ok)


def scope_cost(
    basis: PriceBasis,
    scope: Mapping[str, list[RequestRecord]],
    arm_records: Mapping[str, list[RequestRecord]],
    windows_s: Mapping[str, float],
    busy_rate_ratio: Interval,
) -> ScopeCost:
    """Cost of ``scope`` (a subset of each arm's measured records) per arm, and the ratio.

    ``busy_rate_ratio`` is the paired SD/baseline ratio of output tokens per busy second over
    the same scope (loadtest.stats): it gives the cost ratio its interval (``cost_ratio``)."""
    per_s = basis.arm_usd_per_hour / SECONDS_PER_HOUR
    costs: dict[str, float | None] = {}
    tokens: dict[str, int] = {}
    shares: dict[str, float | None] = {}
    for arm in Arm:
        name = arm.value
        records = scope.get(name, [])
        total_busy = _busy_s(arm_records.get(name, []))
        window = windows_s.get(name, 0.0)
        tokens[name] = _tokens(records)
        shares[name] = _busy_s(records) / total_busy if total_busy > 0 else None
        share = shares[name]
        if share is None or tokens[name] == 0:
            costs[name] = None
        else:
            costs[name] = per_s * window * share / tokens[name] * TOKENS_PER_UNIT
    return ScopeCost(
        usd_per_million_output_tokens=costs,
        output_tokens=tokens,
        busy_share=shares,
        ratio=cost_ratio(costs, busy_rate_ratio),
    )


def cost_ratio(costs: Mapping[str, float | None], busy_rate_ratio: Interval) -> Interval:
    """SD / baseline cost per 1M output tokens with the paired interval's relative width.

    The estimate is the ratio of the two measured costs (all successful requests, whole
    windows); the bounds scale it by the paired busy-time rate interval (pairs only):
    cost ratio = effective-concurrency ratio / busy-rate ratio, the first fixed per run."""
    base, sd = costs.get(Arm.BASELINE.value), costs.get(Arm.SPECULATIVE.value)
    rate, low, high = busy_rate_ratio.estimate, busy_rate_ratio.low, busy_rate_ratio.high
    estimate = sd / base if sd is not None and base else None
    lower = upper = None
    if estimate is not None and rate and low and high:
        lower, upper = estimate * rate / high, estimate * rate / low
    return Interval(
        estimate=estimate,
        low=lower,
        high=upper,
        n=busy_rate_ratio.n,
        confidence=busy_rate_ratio.confidence,
    )


NO_SWEEP = "no concurrency sweep in this run: cost shown at the measured load only"


def cost_summary(
    basis: PriceBasis,
    measured: Mapping[str, list[RequestRecord]],
    windows_s: Mapping[str, float],
    busy_rate_ratios: Mapping[str | None, Interval],
    sweep: Mapping[str, Mapping[int, float | None]] | None = None,
    bucket_ratios: Mapping[tuple[str, str], Interval] | None = None,
    length_buckets: Sequence[int] | None = None,
) -> CostSummary:
    """Every cost figure of a run.

    ``measured``: each arm's measured records (warm-up excluded); ``busy_rate_ratios``: the
    paired ratio per scope (None: all classes); ``sweep``: arm -> concurrency -> throughput;
    ``bucket_ratios``: a replayed trace's paired ratio per (class, input bucket), the buckets
    of ``length_buckets``."""
    classes = sorted({r.prompt_class for records in measured.values() for r in records})

    def of_class(name: str) -> dict[str, list[RequestRecord]]:
        return {arm: [r for r in rs if r.prompt_class == name] for arm, rs in measured.items()}

    optimal: dict[str, OptimalLoadCost] | None = None
    if sweep:
        optimal = {
            arm: point
            for arm, points in sweep.items()
            if (point := optimal_load(points, basis.arm_usd_per_hour)) is not None
        }
    return CostSummary(
        basis=basis,
        overall=scope_cost(basis, measured, measured, windows_s, busy_rate_ratios[None]),
        by_class={
            name: scope_cost(basis, of_class(name), measured, windows_s, busy_rate_ratios[name])
            for name in classes
            if name in busy_rate_ratios
        },
        by_bucket=_by_bucket(basis, measured, windows_s, bucket_ratios or {}, length_buckets),
        at_optimal_load=optimal or None,
        optimal_load_note=None if optimal else NO_SWEEP,
    )


def _by_bucket(
    basis: PriceBasis,
    measured: Mapping[str, list[RequestRecord]],
    windows_s: Mapping[str, float],
    ratios: Mapping[tuple[str, str], Interval],
    length_buckets: Sequence[int] | None,
) -> dict[str, dict[str, ScopeCost]]:
    """Class -> input bucket -> cost: a cell is charged its share of the arm's busy time, as a
    class is."""
    result: dict[str, dict[str, ScopeCost]] = {}
    for (name, bucket), ratio in sorted(ratios.items()):
        scope = {
            arm: [
                r
                for r in rs
                if r.prompt_class == name
                and record_bucket(r.input_tokens, length_buckets) == bucket
            ]
            for arm, rs in measured.items()
        }
        result.setdefault(name, {})[bucket] = scope_cost(basis, scope, measured, windows_s, ratio)
    return result
