"""How the two arms share the run's time: ``loadtest.arms_mode``.

``sequential``: one arm whole, then the other. ``alternating`` (loadtest/alternating.py):
the arms take turns in blocks of the schedule in ABBA order (arms sharing a machine: the
local run).
``concurrent``: both arms' Locust processes start together and open their measured windows
at one instant, so the same schedule (the same prompts in the same order; open loop: the same
arrival times) is released to both arms together, each with its own users. A drift of the
hardware or the network then falls on both arms alike, and the run takes one arm's time.

The shared instant: each arm's process (the single process, or a distributed arm's master)
writes its ready file once its warm-up is done and /metrics is scraped; when both files are
there, both processes derive the same instant from them (the later one plus
``START_MARGIN_S``). ``start_at_wall`` in the plans bounds the wait, so an arm whose
partner crashed still runs. The arms' first measured requests (``first_request_wall`` in
each window file, from the records) show how close the start was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from experiment.config import ArmsMode
from loadtest.launch import (
    LOCUSTFILE,
    STOP_TIMEOUT_S,
    ArmProcesses,
    connect_wait_s,
    launch_arm,
    master_command,
    stop_arm,
    wait_arm,
    worker_command,
)
from loadtest.plan import RunPlan
from loadtest.records import read_records
from loadtest.results import ArmsTiming
from loadtest.window import WindowMeta

LOG = logging.getLogger("loadtest")
# Beyond Locust's own -t and stop timeout: how long a hung Locust may outlive its arm.
KILL_MARGIN_S = 60
# After the later arm is ready: room for both processes to see its ready file.
START_MARGIN_S = 0.5
READY_POLL_S = 0.05
# Locust's start-up (import, users spawned) on a busy machine: part of the bound of the wait.
STARTUP_ALLOWANCE_S = 60.0
# Both arms' first measured requests should leave within this of each other.
START_SPREAD_GOAL_S = 1.0


# --- In the Locust process (loadtest/locustfile.py) ---------------------------------------


def announce_ready(plan: RunPlan, at_wall: float) -> None:
    """Write this arm's ready file (atomically: the partner reads it while it is written)."""
    own = next(Path(p) for p in plan.ready_files if Path(p).name == f"ready_{plan.arm}.json")
    tmp = own.with_suffix(".tmp")
    tmp.write_text(json.dumps({"arm": plan.arm, "ready_wall": at_wall}))
    os.replace(tmp, own)


def shared_start(ready_files: Sequence[str]) -> float | None:
    """The instant both arms open their windows; None while an arm is not ready."""
    times = []
    for path in ready_files:
        try:
            times.append(json.loads(Path(path).read_text())["ready_wall"])
        except FileNotFoundError:
            return None
    return max(times) + START_MARGIN_S


# --- In the runner ----------------------------------------------------------------------


def ready_file(run_dir: Path, arm: str) -> Path:
    return run_dir / f"ready_{arm}.json"


def check_ports_free(ports: Sequence[int]) -> None:
    """Raise a clear error when a master port is taken (Locust's own error names no setting)."""
    for port in sorted(set(ports)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As Locust's master binds (ZeroMQ: every interface, SO_REUSEADDR), so a port
            # in TIME_WAIT from a previous run counts as free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("", port))
            except OSError as err:
                raise ValueError(
                    f"port {port} for a distributed arm's Locust master is taken ({err.strerror});"
                    f" concurrent arms use {', '.join(map(str, ports))}: set "
                    "loadtest.master_port to a free range"
                ) from None


def start_bound(plans: Sequence[RunPlan], workers: int, connect_timeout_s: int) -> float:
    """The latest shared start: after start-up, the workers' connection and the warm-ups
    (each bounded by the request timeout), and never beyond half the arm's time."""
    plan = plans[0]
    warmups = len(plan.schedule) - len(plan.measured)
    allowance = (
        STARTUP_ALLOWANCE_S
        + connect_wait_s(workers, connect_timeout_s)
        + warmups * plan.params.timeout_s
    )
    return time.time() + min(allowance, plan.shape.max_duration_s / 2)


@dataclass
class StartedArm:
    """One arm's Locust processes, as launched."""

    plan: RunPlan
    processes: ArmProcesses
    log: IO[bytes]
    log_path: Path
    timeout_s: float
    workers: int
    started: float = field(default_factory=time.monotonic)
    launched_wall: float = field(default_factory=time.time)


def start_arm(
    plan: RunPlan,
    run_dir: Path,
    locustfile: Path = LOCUSTFILE,
    *,
    workers: int,
    local_workers: bool,
    master_port: int,
    workers_connect_timeout_s: int,
    name: str | None = None,
) -> StartedArm:
    """Write the arm's plan and start its Locust processes. ``name``: of the plan file and
    Locust's outputs (default the arm; a block of alternating arms has its own)."""
    name = name or plan.arm
    locust_dir = run_dir / "locust"
    locust_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / f"plan_{name}.json"
    plan.write(plan_path)
    run_time = max(1, int(plan.shape.max_duration_s + 0.999))
    master = master_command(
        plan, plan_path, locust_dir, workers=workers, master_port=master_port,
        locustfile=locustfile, workers_connect_timeout_s=workers_connect_timeout_s, name=name,
    )  # fmt: skip
    worker_commands = (
        [worker_command(master_port, locustfile)] * workers if workers > 1 and local_workers else []
    )
    LOG.info(
        "%s: %d measured requests at concurrency %d against %s (at most %ss, %d worker%s)",
        name, len(plan.measured), plan.shape.concurrency, plan.base_url, run_time,
        workers, "" if workers == 1 else "s",
    )  # fmt: skip
    log_path = locust_dir / f"{name}.log"
    log = log_path.open("wb")
    timeout_s = (
        run_time + STOP_TIMEOUT_S + KILL_MARGIN_S + plan.params.timeout_s
        + connect_wait_s(workers, workers_connect_timeout_s)
    )  # fmt: skip
    return StartedArm(
        plan, launch_arm(master, worker_commands, log), log, log_path, timeout_s, workers
    )


def finish_arm(arm: StartedArm, returncode: int | None, cancelled: bool) -> WindowMeta:
    """Complete the arm's window file once its processes are gone."""
    arm.log.close()
    plan = arm.plan
    if Path(plan.meta_path).is_file():
        meta = WindowMeta.read(plan.meta_path, plan.arm)
    else:  # Locust ended before it could write one
        stopped_by = "killed" if returncode is None else "crashed"
        meta = WindowMeta(arm=plan.arm, stopped_by=stopped_by, workers=arm.workers)
    if cancelled:
        meta.stopped_by = "cancelled"
    meta.locust_returncode = returncode
    meta.elapsed_s = time.monotonic() - arm.started
    meta.launched_wall = arm.launched_wall
    meta.start_at_wall = plan.start_at_wall
    meta.first_request_wall = first_request_wall(Path(plan.records_path))
    meta.write(plan.meta_path)
    if not cancelled and (returncode not in (0, None) or meta.stopped_by in ("killed", "crashed")):
        LOG.warning(
            "%s: Locust ended with %s (%s); see %s",
            plan.arm, returncode, meta.stopped_by, arm.log_path,
        )  # fmt: skip
    return meta


def first_request_wall(records_path: Path) -> float | None:
    """When the arm's first measured request left (None: none did)."""
    if not records_path.is_file():
        return None
    starts = [r.wall_start for r in read_records(records_path) if not r.warmup and r.wall_start]
    return min(starts) if starts else None


def run_together(
    arms: Sequence[StartedArm], on_cancel: Callable[[BaseException], None]
) -> list[WindowMeta]:
    """Wait for arms launched together, under one bound (the longest arm's); a cancel
    (``on_cancel`` is told, then it propagates) stops every arm, keeping what it measured."""
    deadline = time.monotonic() + max(arm.timeout_s for arm in arms)
    codes: dict[int, int | None] = {}
    try:
        for i, arm in enumerate(arms):
            codes[i] = wait_arm(arm.processes, max(0.0, deadline - time.monotonic()))
    except BaseException as cancel:
        on_cancel(cancel)
        for i, arm in enumerate(arms):
            if i not in codes:
                with contextlib.suppress(Exception):
                    stop_arm(arm.processes)
        for i, arm in enumerate(arms):
            finish_arm(arm, codes.get(i), cancelled=i not in codes)
        raise
    return [finish_arm(arm, codes[i], cancelled=False) for i, arm in enumerate(arms)]


# --- In the summary ---------------------------------------------------------------------


def arms_timing(
    mode: str | None, metas: Mapping[str, WindowMeta], block_requests: int | None = None
) -> ArmsTiming | None:
    """When each arm ran, and for concurrent arms the wall time saved against running them
    one after the other; for alternating arms the order of their blocks and what the
    blocks' start-ups cost (None: a run from before arms_mode, or no arm ran)."""
    if mode is None:
        return None
    ran = {arm: m for arm, m in metas.items() if m.launched_wall is not None and m.elapsed_s}
    if not ran:
        return None
    elapsed = {arm: m.elapsed_s for arm, m in ran.items()}
    begin = min(m.launched_wall for m in ran.values() if m.launched_wall is not None)
    run_elapsed = max(_ended_wall(m) for m in ran.values()) - begin
    firsts = {arm: m.first_request_wall for arm, m in metas.items()}
    known = [t for t in firsts.values() if t is not None]
    spread = max(known) - min(known) if len(known) == len(metas) and len(known) > 1 else None
    blocks = sorted((b.turn, arm, b) for arm, m in metas.items() for b in m.blocks)
    return ArmsTiming(
        mode=mode,
        first_request_wall=firsts,
        start_spread_s=spread,
        arms_elapsed_s={arm: e for arm, e in elapsed.items() if e is not None},
        run_elapsed_s=run_elapsed,
        wall_saved_s=sum(e for e in elapsed.values() if e is not None) - run_elapsed,
        block_order=[arm for _, arm, _ in blocks],
        block_requests=block_requests if blocks else None,
        block_overhead_s=(
            sum((b.elapsed_s or 0.0) - b.window_s for _, _, b in blocks) if blocks else None
        ),
    )


def _ended_wall(meta: WindowMeta) -> float:
    """When the arm's last Locust process ended (alternating: its last block's)."""
    ends = [
        b.launched_wall + b.elapsed_s
        for b in meta.blocks
        if b.launched_wall is not None and b.elapsed_s is not None
    ]
    assert meta.launched_wall is not None and meta.elapsed_s is not None
    return max(ends) if ends else meta.launched_wall + meta.elapsed_s


def timing_warnings(timing: ArmsTiming | None) -> list[str]:
    if timing is None or timing.mode != ArmsMode.CONCURRENT or timing.start_spread_s is None:
        return []
    if timing.start_spread_s <= START_SPREAD_GOAL_S:
        return []
    return [
        f"concurrent arms: first measured requests {timing.start_spread_s:.1f} s apart (goal "
        f"<= {START_SPREAD_GOAL_S:g} s): one arm's warm-up or start-up outlasted the bound of "
        "the shared start; the arms' windows overlap only in part"
    ]
