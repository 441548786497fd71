"""Alternating arms (``loadtest.arms_mode=alternating``): the arms take turns in blocks.

Where the arms share one machine (the local run), running them at once would make them
compete for its cores, and running one whole and then the other puts a slow drift of the
machine (thermal, memory bandwidth, a neighbour) on one arm only. Alternating cuts the
measured schedule into blocks of ``loadtest.alternating_block_requests`` and runs them in a
mirrored order of rounds: A1 B1, B2 A2, A3 B3, ... (ABBA; three arms: A1 B1 C1, C2 B2 A2, ...),
each block on one arm alone. A drift that is linear in time then falls on every arm alike
within each pair of rounds, and a pair (the same prompt in the same schedule slot) is
measured in neighbouring blocks, close in time.

A block is the arm's plan cut to a slice of its measured schedule (the warm-up only in the
arm's first block: the server stays warm while the other arm runs) and run by Locust
processes of its own, so every guarantee of one arm's run holds per block: exactly once,
the time bound, a cancel that keeps what was measured. Each block leaves its own files in
``blocks/``; after every block the arm's ``records_<arm>.jsonl`` and ``window_<arm>.json``
are rewritten from its blocks so far, so the summary reads one file per arm as in the other
modes (a cancel included). The window file lists the blocks (``WindowMeta.blocks``): the
summary measures the arm's window as the sum of its blocks' spans, not across the other
arm's blocks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from loadtest.acceptance import PER_POSITION, Counters
from loadtest.arms import run_together, start_arm
from loadtest.plan import RunPlan
from loadtest.results import ArrivalStampCounts
from loadtest.window import NOT_RUN, BlockWindow, WindowMeta

LOG = logging.getLogger("loadtest")
BLOCKS_DIR = "blocks"


def block_order(arms: int, blocks: int) -> list[tuple[int, int]]:
    """(arm, block) in the order they run: round r runs block r of every arm, forwards in
    even rounds and backwards in odd ones (two arms: A0 B0 B1 A1 A2 B2 ...)."""
    if arms < 1 or blocks < 0:
        raise ValueError(f"{arms} arms and {blocks} blocks: need at least one arm")
    order = []
    for block in range(blocks):
        turn = range(arms) if block % 2 == 0 else range(arms - 1, -1, -1)
        order += [(arm, block) for arm in turn]
    return order


def block_slices(measured: int, block_requests: int) -> list[range]:
    """Positions in the measured schedule of each block: consecutive slices of
    ``block_requests`` (the last one shorter when they do not divide)."""
    if block_requests < 1:
        raise ValueError(f"block of {block_requests} requests: set at least 1")
    return [
        range(start, min(start + block_requests, measured))
        for start in range(0, measured, block_requests)
    ]


def block_name(arm: str, block: int) -> str:
    return f"{arm}_{block}"


def block_plan(
    plan: RunPlan, block: int, positions: range, run_dir: Path, time_left_s: float
) -> RunPlan:
    """The arm's plan cut to one block: its slice of the measured schedule (open loop:
    arrivals from the block's own start), the warm-up in the first block only, its own
    files under ``blocks/`` and the arm's time bound still left."""
    measured = plan.measured[positions.start : positions.stop]
    offset = measured[0].arrival_s if measured and measured[0].arrival_s is not None else 0.0
    items = [
        item
        if item.arrival_s is None
        else dataclasses.replace(item, arrival_s=item.arrival_s - offset)
        for item in measured
    ]
    warmup = [item for item in plan.schedule if item.warmup] if block == 0 else []
    name = block_name(plan.arm, block)
    directory = run_dir / BLOCKS_DIR
    return dataclasses.replace(
        plan,
        schedule=warmup + items,
        shape=dataclasses.replace(plan.shape, max_duration_s=max(1.0, time_left_s)),
        records_path=str(directory / f"records_{name}.jsonl"),
        meta_path=str(directory / f"window_{name}.json"),
        ready_files=[],
        start_at_wall=None,
    )


@dataclasses.dataclass
class _Block:
    turn: int
    block: int
    plan: RunPlan


def run_alternating(
    plans: Sequence[RunPlan],
    out_dir: Path,
    master_port: int,
    *,
    workers: int,
    local_workers: bool,
    workers_connect_timeout_s: int,
    block_requests: int,
    on_cancel: Callable[[BaseException], None],
) -> None:
    """Run the arms' blocks in ABBA order, one at a time, and keep each arm's records and
    window file complete after every block. An arm whose block ends other than with its
    schedule done (its time bound, a crash), or whose time bound is spent, runs no further
    block. Raises what cancelled the run after stopping the running block and writing every
    arm's files."""
    slices = block_slices(len(plans[0].measured), block_requests)
    for plan in plans:  # the arm's whole plan, as in the other modes (each block has its own)
        plan.write(out_dir / f"plan_{plan.arm}.json")
    ran: list[list[_Block]] = [[] for _ in plans]
    cut_short: dict[int, str] = {}  # arm -> why its remaining blocks do not run
    try:
        for turn, (index, block) in enumerate(block_order(len(plans), len(slices))):
            plan = plans[index]
            spent = sum(_meta(b).elapsed_s or 0.0 for b in ran[index])
            if spent >= plan.shape.max_duration_s:
                cut_short.setdefault(index, "time_limit")
            if index in cut_short:
                merge_arm(plan, ran[index], slices, cut_short[index])
                continue
            cut = block_plan(plan, block, slices[block], out_dir, plan.shape.max_duration_s - spent)
            ran[index].append(_Block(turn, block, cut))
            started = start_arm(
                cut, out_dir / BLOCKS_DIR, workers=workers, local_workers=local_workers,
                master_port=master_port, workers_connect_timeout_s=workers_connect_timeout_s,
                name=block_name(plan.arm, block),
            )  # fmt: skip
            meta = run_together([started], on_cancel)[0]
            if meta.stopped_by != "schedule_done":
                cut_short[index] = meta.stopped_by
            merge_arm(plan, ran[index], slices, cut_short.get(index))
    except BaseException:
        for index, plan in enumerate(plans):
            merge_arm(plan, ran[index], slices, "cancelled")
        raise


def _meta(block: _Block) -> WindowMeta:
    return WindowMeta.read(block.plan.meta_path, block.plan.arm)


def merge_arm(
    plan: RunPlan, blocks: Sequence[_Block], slices: Sequence[range], cut_short: str | None
) -> WindowMeta:
    """Write the arm's records file (its blocks' records in the order they ran) and its
    window file (the blocks combined) from the blocks run so far. ``cut_short``: why the
    arm's remaining blocks will not run (None: they still may)."""
    metas = [_meta(block) for block in blocks]
    ran = [(b, m) for b, m in zip(blocks, metas, strict=True) if m.stopped_by != NOT_RUN]
    Path(plan.records_path).parent.mkdir(parents=True, exist_ok=True)
    with Path(plan.records_path).open("w") as merged:
        for block, _ in ran:
            path = Path(block.plan.records_path)
            if path.is_file():
                merged.write(path.read_text())
    never_run = sum(map(len, slices)) - sum(len(slices[block.block]) for block, _ in ran)
    meta = combine_windows(plan.arm, ran, never_run)
    if cut_short is not None and never_run and ran and meta.stopped_by == "schedule_done":
        meta.stopped_by = cut_short  # every block it ran was done, but not every block ran
    meta.write(plan.meta_path)
    return meta


def combine_windows(
    arm: str, blocks: Sequence[tuple[_Block, WindowMeta]], never_run: int
) -> WindowMeta:
    """One window for the arm from its blocks' windows (``never_run``: measured requests
    of blocks that did not run, counted as not started)."""
    metas = [meta for _, meta in blocks]
    if not metas:
        return WindowMeta(arm=arm, not_started_requests=never_run)
    causes = [meta.stopped_by for meta in metas]
    if "cancelled" in causes:
        stopped_by = "cancelled"
    else:  # the first block that did not finish its slice stopped the arm
        stopped_by = next((c for c in causes if c != "schedule_done"), "schedule_done")
    opened = [m for m in metas if m.window_s > 0]
    before, after = sum_counters([(m.metrics_before, m.metrics_after) for m in metas])
    codes = [m.locust_returncode for m in metas]
    firsts = [m.first_request_wall for m in metas if m.first_request_wall is not None]
    skews = [m for m in metas if m.clock_skew_ms is not None]
    worst_skew = max(skews, key=lambda m: m.clock_skew_ms or 0.0) if skews else None
    return WindowMeta(
        arm=arm,
        stopped_by=stopped_by,
        window_start_wall=metas[0].window_start_wall,
        window_end_wall=metas[-1].window_end_wall,
        window_s=sum(m.window_s for m in metas),
        load_generator_cpu=_weighted(opened, lambda m: m.load_generator_cpu),
        workers=metas[0].workers,
        worker_cpu={
            worker: _weighted(opened, _worker_share(worker))
            for worker in sorted({w for m in metas for w in m.worker_cpu})
        },
        worker_stopped_by=metas[-1].worker_stopped_by,
        lost_workers=sorted({w for m in metas for w in m.lost_workers}),
        arrival_stamps=_stamps([m.arrival_stamps for m in metas]),
        clock_skew_ms=worst_skew.clock_skew_ms if worst_skew else None,
        clock_skew_uncertainty_ms=worst_skew.clock_skew_uncertainty_ms if worst_skew else None,
        unfinished_requests=sum(m.unfinished_requests for m in metas),
        not_started_requests=sum(m.not_started_requests for m in metas) + never_run,
        metrics_before=before,
        metrics_after=after,
        # The first block that did not end cleanly speaks for the arm (None: killed).
        locust_returncode=next((c for c in codes if c != 0), 0),
        elapsed_s=sum(m.elapsed_s or 0.0 for m in metas),
        launched_wall=metas[0].launched_wall,
        first_request_wall=min(firsts) if firsts else None,
        blocks=[
            BlockWindow(
                block=block.block,
                turn=block.turn,
                first_index=block.plan.measured[0].index,
                last_index=block.plan.measured[-1].index,
                stopped_by=meta.stopped_by,
                launched_wall=meta.launched_wall,
                elapsed_s=meta.elapsed_s,
                window_s=meta.window_s,
                histograms_before=meta.histograms_before,
                histograms_after=meta.histograms_after,
            )
            for block, meta in blocks
        ],
    )


def _weighted(
    metas: Sequence[WindowMeta], value: Callable[[WindowMeta], float | None]
) -> float | None:
    """The window-weighted mean of a per-block share (None: no block has one)."""
    pairs = [(v, m.window_s) for m in metas if (v := value(m)) is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if pairs and total > 0 else None


def _worker_share(worker: str) -> Callable[[WindowMeta], float | None]:
    return lambda meta: meta.worker_cpu.get(worker)


def _stamps(counts: Sequence[ArrivalStampCounts | None]) -> ArrivalStampCounts | None:
    known = [c for c in counts if c is not None]
    if not known:
        return None
    return ArrivalStampCounts(kernel=sum(c.kernel for c in known), user=sum(c.user for c in known))


def sum_counters(
    windows: Sequence[tuple[Counters | None, Counters | None]],
) -> tuple[Counters | None, Counters | None]:
    """/metrics counters around several windows as one before/after pair: the first
    window's before, and after it the sum of every window's own movement, so what the
    server did between the arm's blocks (another arm's requests through a shared server)
    is left out. A window without both scrapes makes the after None (not available)."""
    if not windows:
        return None, None
    first = windows[0][0]
    if first is None or any(b is None or a is None for b, a in windows):
        return first, None
    total: Counters = _int_positions(first)
    for before, after in windows:
        assert before is not None and after is not None  # checked above
        previous = _int_positions(before)
        for name, value in _int_positions(after).items():
            if name == PER_POSITION:
                positions = total.setdefault(name, {})
                for pos, count in value.items():
                    moved = count - previous.get(name, {}).get(pos, 0.0)
                    positions[pos] = positions.get(pos, 0.0) + moved
            else:
                total[name] = total.get(name, 0.0) + value - previous.get(name, 0.0)
    return first, total


def _int_positions(counters: Counters) -> Counters:
    # JSON round trips turn the position keys into strings.
    copied = dict(counters)
    if PER_POSITION in copied:
        copied[PER_POSITION] = {int(k): v for k, v in copied[PER_POSITION].items()}
    return copied
