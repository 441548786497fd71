"""``guardrails``: thresholds of the load-test alarms and of the live-traffic rules."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Section
from experiment.config.cron import longest_gap_s

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class LiveGuardrailConfig(Section):
    """Guardrails on live traffic: Prometheus rules over what the servers and the gateway
    export themselves (guardrails/rules.py), evaluated by Amazon Managed Service for
    Prometheus on EKS, by the Argo Rollouts analysis, and by a real Prometheus locally."""

    enabled: bool = Field(
        default=True,
        description=(
            "Scrape both arms and the gateway into a Prometheus workspace and evaluate the "
            "guardrail rules there and in the rollback analysis; false: the load-test "
            "CloudWatch alarms only (nothing watches traffic after the pilot)."
        ),
    )
    scrape_interval_s: Annotated[int, Field(ge=1, le=300)] = Field(
        default=30, description="Seconds between two scrapes of every target; 1-300."
    )
    evaluation_interval_s: Annotated[int, Field(ge=1, le=600)] = Field(
        default=60, description="Seconds between two evaluations of the rules; 1-600."
    )
    window_s: Annotated[int, Field(ge=2, le=3600)] = Field(
        default=300,
        description=(
            "Seconds of counters each rate covers (acceptance, shares, per-token latency); "
            "at least two scrapes, at most 3600."
        ),
    )
    pending_s: Annotated[int, Field(ge=0, le=3600)] = Field(
        default=60,
        description=(
            "Seconds a condition must hold before its alert fires (Prometheus `for`); 0 fires "
            "at the first evaluation that sees it; 0-3600."
        ),
    )
    idle_requests_per_s: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description=(
            "An arm finishing at most this many requests per second over the window, with none"
            " running, is idle: rules that need traffic stay quiet, and an idle arm is no "
            "fault. Its metrics must still be scraped (absent or stale series fire)."
        ),
    )
    max_fallback_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.05,
        description=(
            "Alert when more than this share of a speculative route's requests were retried "
            "on the baseline (the gateway's fallback); 0 to <1."
        ),
    )
    latency_margin: Annotated[float, Field(gt=0, le=10)] = Field(
        default=0.10,
        description=(
            "Alert when the speculative arm's mean time per output token on the probe's "
            "prompts of a class exceeds the baseline's on the same prompts by more than this "
            "fraction (speculation stopped paying, e.g. under high load), or by more than the "
            "loss schedule_predicted_speedups accepts at the current batch size; above 0, at "
            "most 10."
        ),
    )
    schedule_predicted_speedups: list[Annotated[float, Field(gt=0)]] | None = Field(
        default=None,
        description=(
            "The predicted speedup of each range of serving.speculation_schedule, in its "
            "order (`python -m tune` prints them with the schedule): where a range's is below "
            "1 (a load where no k pays and the schedule keeps its least costly k), "
            "speculation stopped paying only when the speculative arm is slower than that "
            "predicted loss plus latency_margin, at the speculative servers' mean batch size; "
            "null: no loss is expected at any load. Each above 0."
        ),
    )
    pilot_floor_factor: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.9,
        description=(
            "The report proposes each routed class's acceptance floor as this factor times "
            "the lower bound of the class's measured acceptance interval (the pilot's); "
            "above 0, at most 1."
        ),
    )
    serving_lookback_s: Annotated[int, Field(ge=60, le=86400)] = Field(
        default=3600,
        description=(
            "Seconds back an arm must have been scraped up for its absence to fire as "
            "missing: an arm that served within this time and is gone is a fault; a pod "
            "still starting (a first deploy's precompile) or never ready has not served, and "
            "is the deploy's progress deadline to judge. An arm gone longer than this stops "
            "firing (the analysis has aborted long before); 60-86400."
        ),
    )
    failure_limit: Annotated[int, Field(ge=0, le=100)] = Field(
        default=0,
        description=(
            "Failed measurements of one guardrail the rollback analysis tolerates: Argo fails "
            "the analysis (and aborts the speculative revision) when a metric's failed "
            "measurements exceed this, counted over the canary's whole life (Argo "
            "failureLimit). A measurement fails only on a firing alert, already debounced by "
            "pending_s, so 0 (abort at the first) is the default; 0-100."
        ),
    )
    consecutive_error_limit: Annotated[int, Field(ge=0, le=100)] = Field(
        default=6,
        description=(
            "Consecutive query errors (workspace unreachable, SigV4 refused) the analysis "
            "tolerates: Argo retries an error after 10 s and errors the analysis, which "
            "aborts the speculative revision, when they exceed this (Argo "
            "consecutiveErrorLimit): the default aborts after about a minute without an "
            "answer; 0-100."
        ),
    )

    def speedups_problem(self, schedule: list[tuple[int, int, int]] | None) -> str | None:
        """What is wrong with schedule_predicted_speedups against serving.speculation_schedule
        (None: nothing); ExperimentConfig reports it, since it reads both sections."""
        speedups = self.schedule_predicted_speedups
        if speedups is None or (schedule is not None and len(speedups) == len(schedule)):
            return None
        if schedule is None:
            return (
                "is set but serving.speculation_schedule is not: there is no range to predict; "
                "remove it or set both from the same `python -m tune` line"
            )
        return (
            f"has {len(speedups)} values for the {len(schedule)} ranges of "
            f"serving.speculation_schedule {[list(r) for r in schedule]}: give one predicted "
            "speedup per range, in its order (`python -m tune` prints both)"
        )

    @model_validator(mode="after")
    def _windows_hold_scrapes(self) -> LiveGuardrailConfig:
        if self.window_s < 2 * self.scrape_interval_s:
            raise ValueError(
                f"guardrails.live.window_s {self.window_s} holds fewer than two scrapes of "
                f"guardrails.live.scrape_interval_s {self.scrape_interval_s}: a rate needs two "
                f"samples; set window_s to at least {2 * self.scrape_interval_s}"
            )
        if self.pending_s > self.window_s:
            raise ValueError(
                f"guardrails.live.pending_s {self.pending_s} is longer than "
                f"guardrails.live.window_s {self.window_s}: the window a condition is judged on "
                "would end before the alert could fire; shorten pending_s or lengthen window_s"
            )
        if self.evaluation_interval_s > self.window_s:
            raise ValueError(
                f"guardrails.live.evaluation_interval_s {self.evaluation_interval_s} is longer "
                f"than guardrails.live.window_s {self.window_s}: part of the traffic would be "
                "seen by no evaluation; shorten the interval or lengthen the window"
            )
        return self


class ProbeConfig(Section):
    """The guardrail probe: a CronJob sending a bounded sample of the prompt suite through the
    gateway at temperature 0, per class, to both arms, and pushing per-class acceptance and
    lossless agreement into the same telemetry (charts/probe.py)."""

    enabled: bool = Field(
        default=True,
        description=(
            "Run the probe on the cluster whenever guardrails.live is enabled; false: no "
            "per-class acceptance when the speculative arm serves several classes."
        ),
    )
    schedule: str = Field(
        default="*/15 * * * *",
        description="Cron schedule of the probe (Kubernetes CronJob syntax, UTC).",
        min_length=9,
    )
    prompts_per_class: Annotated[int, Field(ge=1, le=32)] = Field(
        default=4, description="Prompts of each class per probe run, to each arm; 1-32."
    )
    max_tokens: Annotated[int, Field(ge=8, le=4096)] = Field(
        default=128, description="Tokens each probe request generates; 8-4096."
    )
    stale_after_s: Annotated[int, Field(ge=60)] = Field(
        default=2400,
        description=(
            "Seconds after the probe's last successful run at which its results count as "
            "missing and the probe-missing rule fires: longer than the schedule's period plus "
            "deadline_s (the default schedule runs every 15 min); at least 60."
        ),
    )
    deadline_s: Annotated[int, Field(ge=30, le=3600)] = Field(
        default=300,
        description=(
            "Seconds a probe run may take in all (the Job's activeDeadlineSeconds): it is "
            "stopped then, never retried (backoffLimit 0), and the next run starts on "
            "schedule; 30-3600."
        ),
    )

    @model_validator(mode="after")
    def _stale_outlasts_the_schedule(self) -> ProbeConfig:
        """Between two runs the results age by up to the schedule's longest gap plus a run's
        deadline; a shorter stale_after_s fires the probe-missing rule on a healthy probe."""
        try:
            gap = longest_gap_s(self.schedule)
        except ValueError as error:
            raise ValueError(f"guardrails.probe.schedule: {error}") from None
        if self.stale_after_s <= gap + self.deadline_s:
            raise ValueError(
                f"guardrails.probe.stale_after_s {self.stale_after_s} is not longer than the "
                f"schedule's longest gap ({gap} s for {self.schedule!r}) plus "
                f"guardrails.probe.deadline_s {self.deadline_s}: the probe-missing rule would "
                f"fire between two healthy runs; set it above {gap + self.deadline_s}"
            )
        return self


class GuardrailConfig(Section):
    """Alarm thresholds of the Observability stack (stacks/alarms.py), checked per run."""

    min_acceptance_rate: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.3,
        description=(
            "Alarm when the SD arm's acceptance (accepted / proposed draft tokens) of"
            " a prompt class falls below this; above 0, at most 1."
        ),
    )
    max_failed_request_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.01, description="Alarm when an arm's failed / sent requests exceed this; 0 to <1."
    )
    # Not 1: greedy outputs on Neuron diverge even between two baselines that differ only in
    # KV-cache settings (vllm-neuron's DFlash bench notes), so one late divergence must not
    # fire the alarm; one prompt of 16 diverging at its first token (15/16 = 0.94) does.
    lossless_min_prefix_agreement: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.95,
        description=(
            "Alarm when the SD arm reproduces less than this share of the baseline's greedy"
            " output before diverging (tokens before each prompt's first divergence / tokens"
            " compared, at temperature 0); above 0, at most 1. The local CPU run is bit-exact"
            " and keeps exact match as its bar."
        ),
    )
    period_minutes: Annotated[int, Field(ge=1, le=1440)] = Field(
        default=5, description="Alarm period, minutes; 1-1440."
    )
    evaluation_periods: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Periods an alarm evaluates."
    )
    live: LiveGuardrailConfig = Field(
        default_factory=LiveGuardrailConfig,
        description="Guardrails on live traffic: Prometheus rules over server and gateway metrics.",
    )
    probe: ProbeConfig = Field(
        default_factory=ProbeConfig,
        description="The probe sending a bounded prompt sample per class through the gateway.",
    )
    alarm_email: str | None = Field(
        default=None,
        description="E-mail address subscribed to the alarms; null: alarms without notification.",
    )

    @property
    def probe_runs(self) -> bool:
        """The probe runs on the cluster: it feeds only the live rules."""
        return self.live.enabled and self.probe.enabled

    @model_validator(mode="after")
    def _live_settings_take_effect(self) -> GuardrailConfig:
        """Settings of the live guardrails and of the probe act only through the live rules:
        with ``live.enabled`` false, one set explicitly could never take effect."""
        if self.live.enabled:
            return self
        # pilot_floor_factor is the report's (its floor proposal), live or not.
        live = self.live.model_fields_set - {"enabled", "pilot_floor_factor"}
        dead = [f"guardrails.live.{key}" for key in sorted(live)]
        probe = self.probe.model_fields_set - ({"enabled"} if not self.probe.enabled else set())
        dead += [f"guardrails.probe.{key}" for key in sorted(probe)]
        if dead:
            raise ValueError(
                f"{', '.join(dead)} can never take effect: guardrails.live.enabled is false, "
                "and only the live rules (and the probe feeding them) read them; remove them, "
                "or set guardrails.live.enabled=true"
            )
        return self

    @field_validator("alarm_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(
                f"guardrails.alarm_email {value!r} is not an e-mail address such as "
                "'oncall@example.com'"
            )
        return value
