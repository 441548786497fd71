"""The trn2 sweep's plan: each candidate (draft, k) is its own arm (charts/app.py deploys
them from the one VllmService construct), compiled once into its fingerprinted artifacts
path, two arms per trn2.48xlarge (8 of its 16 devices each).

The candidates follow the serving profile (serving.profile, experiment.config.PROFILES):
the reproduction sweeps the fork's plain drafts over k, a new deployment its EAGLE3 drafter
over k 3-7; the plan says which profile it is for, how far its drafter is validated and
where its acceptance figures will come from.

Nothing here talks to AWS: the plan is arithmetic over the configuration, printed before
anything starts so the compiles, node-hours and cost are known up front.
"""

from __future__ import annotations

import math

from experiment.config import PROFILES, Arm, ExperimentConfig
from runtime.artifacts import compile_fingerprint
from runtime.spec import Generation
from tune.results import Setting, Trn2Plan


def candidate_config(config: ExperimentConfig, setting: Setting) -> ExperimentConfig:
    """The configuration whose speculative arm is ``setting`` (everything else as given)."""
    assert setting.draft is not None, "the baseline is not a candidate"
    return config.with_speculative(setting.draft, setting.k, config.serving.speculative_service)


def candidates(config: ExperimentConfig) -> list[Setting]:
    tuning = config.tuning
    return [Setting(draft=d, k=k) for d in tuning.drafts for k in tuning.measured_k]


def fingerprints(config: ExperimentConfig) -> dict[str, str]:
    """Compile fingerprint of the baseline and of every candidate, by label."""
    prints = {"baseline": compile_fingerprint(config.serving_spec(Arm.BASELINE))}
    for setting in candidates(config):
        spec = candidate_config(config, setting).serving_spec(Arm.SPECULATIVE)
        prints[setting.label] = compile_fingerprint(spec)
    return prints


def trn2_plan(config: ExperimentConfig, already_compiled: set[str] | None = None) -> Trn2Plan:
    tuning = config.tuning
    nodes = config.cluster.neuron_nodes
    prints = fingerprints(config)
    unique = set(prints.values())
    reused = unique & (already_compiled or set())
    compiles = len(unique - reused)
    arms = len(prints)
    arms_per_node = nodes.devices // config.serving.neuron_devices
    # An arm holds its share of a node while it compiles and while it is measured.
    arm_hours = compiles * tuning.compile_hours + arms * tuning.measure_hours
    node_hours = arm_hours / arms_per_node
    price = config.pricing.neuron[nodes.capacity_type]
    low_k = PROFILES[config.serving.profile].k_range[0]
    return Trn2Plan(
        candidates=candidates(config),
        compiles=compiles,
        already_compiled=len(reused),
        node_hours=node_hours,
        arms_per_node=arms_per_node,
        usd_per_hour=price.usd_per_hour,
        price_source=price.source,
        price_nominal=price.nominal,
        cost_usd=node_hours * price.usd_per_hour,
        # Within the profile's k range: a new deployment re-tunes k in 3-7, nothing below.
        predicted_k=[
            k for k in range(low_k, tuning.predict_k_max + 1) if k not in tuning.measured_k
        ],
    )


# What one candidate's compile builds, per generation.
COMPILED = {
    Generation.NEURON_FORK: "fused target+draft per candidate, NxD Inference",
    Generation.NEURON_PLUGIN: "target + draft graphs per candidate, vllm-neuron",
}


def trn2_plan_text(plan: Trn2Plan, config: ExperimentConfig) -> str:
    nodes = config.cluster.neuron_nodes
    serving = config.serving
    profile = PROFILES[serving.profile]
    wall = math.ceil((len(plan.candidates) + 1) / plan.arms_per_node)
    lines = [
        f"plan (trn2, profile {serving.profile.value}): {len(plan.candidates)} candidate arms "
        f"+ the baseline, {plan.arms_per_node} arms per {nodes.instance_type} "
        f"({serving.neuron_devices} of {nodes.devices} devices each)",
        f"  serving: {serving.generation.value}, {serving.image}",
        f"  drafter: {profile.drafter}",
        f"  acceptance: {profile.acceptance}",
        f"  expected: {profile.expected}",
        *(f"  arm {s.label}" for s in plan.candidates),
        f"  compiles: {plan.compiles} ({COMPILED[serving.generation]}; "
        f"{plan.already_compiled} already in the store by fingerprint)",
        f"  node-hours: {plan.node_hours:.1f} ({config.tuning.compile_hours:g} h per compile, "
        f"{config.tuning.measure_hours:g} h per arm measured; at least {wall} rounds of "
        f"{plan.arms_per_node} arms)",
        f"  cost: {plan.cost_usd:,.0f} USD at {plan.usd_per_hour:g} USD/h "
        f"({nodes.capacity_type.value}; {plan.price_source}"
        + (", NOMINAL" if plan.price_nominal else "")
        + ")",
        "  predicted, not measured: "
        + (f"k = {plan.predicted_k}" if plan.predicted_k else "none, every k in range is measured"),
    ]
    if plan.node_hours > config.tuning.budget_node_hours:
        lines.append(
            f"  OVER BUDGET: {plan.node_hours:.1f} node-hours > tuning.budget_node_hours "
            f"{config.tuning.budget_node_hours:g}; measure fewer k (tuning.holdout_k) or drafts"
        )
    return "\n".join(lines)
