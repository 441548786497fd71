"""Settings judged against another section's: each problem is written by the section that
owns the setting (its ``*_problem`` method); ExperimentConfig raises the first at its path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from experiment.config.guardrails import GuardrailConfig
from experiment.config.local import LocalConfig
from experiment.config.serving import ServingConfig
from experiment.config.tuning import TuningConfig


class Sections(Protocol):
    """The sections these checks read (ExperimentConfig has them; naming it would be a cycle)."""

    @property
    def guardrails(self) -> GuardrailConfig: ...
    @property
    def serving(self) -> ServingConfig: ...
    @property
    def tuning(self) -> TuningConfig: ...
    @property
    def local(self) -> LocalConfig: ...


def cross_section_problems(config: Sections) -> Iterator[tuple[tuple[str, ...], str]]:
    checks = (
        (
            ("guardrails", "live", "schedule_predicted_speedups"),
            config.guardrails.live.speedups_problem(config.serving.speculation_schedule),
        ),
        (
            ("tuning", "local_drafts"),
            config.tuning.local_drafts_problem(config.local.generator.drafts),
        ),
    )
    for loc, problem in checks:
        if problem:
            yield loc, problem
