"""The plan of one arm's run: what the Locust process executes, derived from the config.

Both arms (and the tiered arm, when the run drives the gateway) get plans that differ only
in ``arm`` and ``base_url`` (and output paths): same request parameters, same schedule,
same load shape.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiment.config import TIERED_ARM, Arm, ArmsMode, ExperimentConfig
from loadtest.client import RequestParams
from loadtest.prompts import (
    ScheduleItem,
    build_schedule,
    load_prompts,
    resolve_path,
    traffic_schedule,
)

# Of the whole comparison's time bound, kept back for Locust start-up, /metrics scrapes, the
# report and CloudWatch (at most this, or 10% of short runs).
RUN_RESERVE_S = 120.0


def arm_time_budget(total_s: float, arms_in_turn: int = 2) -> float:
    """Each arm's share of ``loadtest.max_duration_s``, the bound of the whole comparison (the
    cluster Job's deadline is that same number): half each when the arms run one after the
    other, all of it when they run at once (``arms_in_turn`` 1)."""
    reserve = min(RUN_RESERVE_S, 0.1 * total_s)
    return max(1.0, (total_s - reserve) / arms_in_turn)


@dataclass(frozen=True)
class LoadShape:
    """Closed loop at ``concurrency``; open loop (Poisson at ``request_rate``) when set, with at
    most ``concurrency`` requests in flight; a trace (``traffic_file``): each request at its
    recorded offset times ``time_scale``, the same open loop. ``max_duration_s``: this arm's
    time bound, its share of ``loadtest.max_duration_s`` (arm_time_budget): no default of its
    own."""

    concurrency: int
    max_duration_s: float
    request_rate: float | None = None
    traffic_file: str | None = None
    time_scale: float | None = None
    burst_writes: bool = False  # a trace's requests due at one instant written together

    @property
    def open_loop(self) -> bool:
        """Requests leave at their arrival times (Poisson or a trace), not as others end."""
        return self.request_rate is not None or self.traffic_file is not None


@dataclass
class RunPlan:
    arm: str
    base_url: str
    params: RequestParams
    shape: LoadShape
    schedule: list[ScheduleItem]
    records_path: str
    meta_path: str
    variant_label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # Concurrent arms (loadtest/arms.py): each arm's process writes its ready file after its
    # warm-up; both open their measured windows at one instant derived from those files, at
    # the latest at start_at_wall (time.time()). Empty/None: as soon as the warm-up is done.
    ready_files: list[str] = field(default_factory=list)
    start_at_wall: float | None = None

    @property
    def measured(self) -> list[ScheduleItem]:
        return [item for item in self.schedule if not item.warmup]

    def write(self, path: Path) -> Path:
        """The plan file, readable by its owner only: a trace's plan holds its prompts."""
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(self.to_json())
        return path

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["schedule"] = [item.to_dict() for item in self.schedule]
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunPlan:
        data = json.loads(text)
        return cls(
            arm=data["arm"],
            base_url=data["base_url"],
            params=RequestParams(**data["params"]),
            shape=LoadShape(**data["shape"]),
            schedule=[ScheduleItem.from_dict(item) for item in data["schedule"]],
            records_path=data["records_path"],
            meta_path=data["meta_path"],
            variant_label=data.get("variant_label", ""),
            extra=data.get("extra", {}),
            ready_files=data.get("ready_files", []),
            start_at_wall=data.get("start_at_wall"),
        )


API = ("chat", "completions")


def local_scale(config: ExperimentConfig) -> ExperimentConfig:
    """The configuration with the local run's small scale (``local.max_tokens``,
    ``local.concurrency``, ``local.requests_per_prompt``) and ``local.arms_mode`` as its
    load: what ``python -m local_run`` and ``python -m loadtest run --local`` measure. Set
    with -c like any key."""
    local = config.local
    loadtest = config.loadtest.model_copy(
        update={
            "max_tokens": local.max_tokens,
            "concurrency": local.concurrency,
            "requests_per_prompt": local.requests_per_prompt,
            "arms_mode": local.arms_mode,
        }
    )
    return config.model_copy(update={"loadtest": loadtest})


def arms_in_turn(mode: ArmsMode, tiered: bool) -> int:
    """How many arms' time bounds follow one another: concurrent serving arms share one, and
    the tiered arm runs after them (alone, so its requests never add to the serving arms'
    load) in the same mode."""
    return (1 if mode is ArmsMode.CONCURRENT else 2) + (1 if tiered else 0)


def build_plan(
    config: ExperimentConfig,
    arm: Arm | str,
    base_url: str,
    run_dir: Path,
    *,
    max_requests: int | None = None,
    api: str = "chat",
    tiered: bool = False,
    max_model_len: int | None = None,
) -> RunPlan:
    """The arm's plan from ``config.loadtest``. ``arm``: a serving arm or ``TIERED_ARM``.
    ``max_requests``: cap on measured requests (after the shuffle; a smoke test of a big
    suite); ``api``: chat or completions; ``tiered``: the run drives the tiered arm too
    (each arm's share of ``loadtest.max_duration_s`` shrinks). With ``loadtest.traffic.file``
    the schedule is the trace's (chat only); a request whose input + output tokens exceed
    ``max_model_len`` (default ``serving.max_model_len``) is refused, named."""
    lt = config.loadtest
    arm = str(arm)
    if arm not in (*Arm, TIERED_ARM):
        raise ValueError(f"arm {arm!r}: use one of {[*map(str, Arm), TIERED_ARM]}")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"{arm} URL {base_url!r} must start with http:// or https://")
    if api not in API:
        raise ValueError(f"api {api!r}: use 'chat' or 'completions'")
    if max_requests is not None and max_requests < 1:
        raise ValueError(f"max_requests {max_requests} must be >= 1 (or unset: every request)")
    params = RequestParams(
        model=config.serving.target_model,
        max_tokens=lt.max_tokens,
        temperature=lt.temperature,
        ignore_eos=lt.ignore_eos,
        seed=lt.seed,
        api="completions" if api == "completions" else "chat",
        timeout_s=lt.request_timeout_s,
        class_header=config.routing.class_header,
    )
    traffic = lt.traffic.file
    if traffic is not None:
        schedule = _trace(config, traffic, api, max_requests, max_model_len)
    else:
        schedule = build_schedule(
            load_prompts(list(lt.prompts.files)),
            requests_per_prompt=lt.requests_per_prompt,
            seed=lt.seed,
            warmup_requests=lt.warmup_requests,
            request_rate=lt.request_rate,
            max_requests=max_requests,
        )
    shape = LoadShape(
        concurrency=lt.concurrency,
        request_rate=None if traffic is not None else lt.request_rate,
        max_duration_s=arm_time_budget(lt.max_duration_s, arms_in_turn(lt.arms_mode, tiered)),
        traffic_file=traffic,
        time_scale=lt.traffic.time_scale if traffic is not None else None,
        burst_writes=traffic is not None and lt.traffic.burst_writes,
    )
    return RunPlan(
        arm=arm,
        base_url=base_url.rstrip("/"),
        params=params,
        shape=shape,
        schedule=schedule,
        records_path=str(run_dir / f"records_{arm}.jsonl"),
        meta_path=str(run_dir / f"window_{arm}.json"),
        variant_label=lt.tiered_label if arm == TIERED_ARM else lt.variant_labels[Arm(arm)],
    )


def _trace(
    config: ExperimentConfig,
    file: str,
    api: str,
    max_requests: int | None,
    max_model_len: int | None,
) -> list[ScheduleItem]:
    from loadtest.traffic import over_long, read_traffic

    lt = config.loadtest
    if api != "chat":
        raise ValueError(
            "loadtest.traffic.file replays conversations: use --api chat (the chat completions "
            "endpoint)"
        )
    requests = read_traffic(resolve_path(file))
    limit = max_model_len or config.serving.max_model_len
    refused = over_long(requests, limit)
    if refused:
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        shown = ", ".join(refused[:10]) + more
        raise ValueError(
            f"{len(refused)} requests of {file} do not fit max_model_len {limit} (input + "
            f"output tokens): {shown}; drop them (re-import) or raise the max_model_len"
        )
    return traffic_schedule(
        requests,
        time_scale=lt.traffic.time_scale,
        warmup_requests=lt.warmup_requests,
        max_requests=max_requests,
    )
