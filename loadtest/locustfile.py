"""Locust entry point: one arm of the comparison, with exact per-request records.

Standalone, with Locust's usual flags (``--csv``/``--html``/``--json`` keep working)::

    locust -f loadtest/locustfile.py --headless -H http://127.0.0.1:8101 -u 4 -r 4 -t 10m \\
        --arm baseline --csv runs/base --html runs/base.html

takes prompts, max_tokens, seed, ... from the experiment configuration (``--loadtest-config
FILE`` layers a config file) and writes raw records to ``--records-dir`` (default
``runs/locust-<arm>-<time>/``). ``python -m loadtest run`` starts this file once per arm with
``--loadtest-plan`` instead. Either way:

- warm-up requests run first (one user, sequentially); Locust's stats are reset after them
  and the measured window starts; ``/metrics`` is scraped at both ends of the window;
- users take requests from one shared schedule (same order for both arms); the run stops by
  itself when the schedule is done, or at ``-t``; each request has a timeout;
- each finished request fires one Locust request event (response time = end-to-end ms; the
  exact TTFT/ITL are in the records, Locust's own timer would stop at the headers).

Single process only (the schedule lives in this process): do not use ``--processes``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.stats import CSV_STATS_INTERVAL_SEC

from loadtest.acceptance import scrape
from loadtest.client import stream_request
from loadtest.plan import RunPlan
from loadtest.prompts import ScheduleItem
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("loadtest (speculative decoding comparison)")
    group.add_argument(
        "--loadtest-plan", default="", help="plan JSON written by python -m loadtest"
    )
    group.add_argument(
        "--arm",
        default="baseline",
        choices=["baseline", "speculative"],
        help="which arm this endpoint is (standalone use)",
    )
    group.add_argument("--loadtest-config", default="", help="experiment config file (YAML/JSON)")
    group.add_argument("--records-dir", default="", help="where records go (standalone use)")
    group.add_argument("--api", default="chat", choices=["chat", "completions"])
    group.add_argument(
        "--max-requests",
        type=int,
        default=0,
        help="cap on measured requests (0: prompts x requests_per_prompt)",
    )


class _RunState:
    """The shared schedule and the measured window of one Locust process."""

    def __init__(self, environment: Environment, plan: RunPlan) -> None:
        self.environment = environment
        self.plan = plan
        self._warmup = [item for item in plan.schedule if item.warmup]
        self._measured: Iterator[ScheduleItem] = iter(plan.measured)
        self.warmup_claimed = False
        self.window_open = Event()
        self.window_start = 0.0
        self.cpu_start = 0.0
        self.window_start_wall = 0.0
        self.pending = 0  # measured requests taken from the schedule and not finished yet
        self.exhausted = False
        self.finished = False
        self.before: dict[str, Any] | None = None
        Path(plan.records_path).parent.mkdir(parents=True, exist_ok=True)
        self._records = Path(plan.records_path).open("w")  # noqa: SIM115 - closed at stop

    def run_warmup(self, session: StreamSession) -> None:
        for item in self._warmup:
            self.execute(session, item)
        self.before = scrape(self.plan.base_url)
        runner = self.environment.runner
        if runner is not None:
            runner.stats.reset_all()  # Locust's own stats exclude the warm-up too
        self.window_start = time.perf_counter()
        self.window_start_wall = time.time()
        self.cpu_start = time.process_time()
        self.window_open.set()

    def next_item(self) -> ScheduleItem | None:
        item = next(self._measured, None)
        if item is None:
            self.exhausted = True
        else:
            self.pending += 1  # counted from here: an open-loop item may wait for its arrival
        return item

    def execute(self, session: StreamSession, item: ScheduleItem) -> RequestRecord:
        record = RequestRecord(
            arm=self.plan.arm,
            index=item.index,
            prompt_id=item.prompt.id,
            prompt_class=item.prompt.prompt_class,
            warmup=item.warmup,
        )
        if item.arrival_s is not None:
            lag = time.perf_counter() - (self.window_start + item.arrival_s)
            record.scheduled_lag_s = max(lag, 0.0)
        stream_request(session, self.plan.base_url, item.prompt.text, self.plan.params, record)
        # Written after the request completed: file I/O stays off the timed path.
        self._records.write(record.to_json() + "\n")
        self._records.flush()
        if not item.warmup:
            self.environment.events.request.fire(
                request_type="POST",
                name=f"{self.plan.arm}/{item.prompt.prompt_class}",
                response_time=(record.e2e_s or 0.0) * 1000.0,
                response_length=record.output_tokens or 0,
                exception=RuntimeError(record.error) if record.error else None,
                context={"prompt_id": item.prompt.id},
            )
        return record

    def finish(self, stopped_by: str) -> None:
        if self.finished:
            return
        self.finished = True
        window_end = time.perf_counter()
        after = scrape(self.plan.base_url) if self.window_open.is_set() else None
        self._records.close()
        meta = {
            "arm": self.plan.arm,
            "stopped_by": stopped_by,
            "window_start": self.window_start,
            "window_start_wall": self.window_start_wall,
            "window_end": window_end,
            "window_s": window_end - self.window_start if self.window_open.is_set() else 0.0,
            # Share of one core this Locust process used in the window: near 1.0 means the
            # load generator itself was the bottleneck and its timestamps lag.
            "load_generator_cpu": (
                (time.process_time() - self.cpu_start) / (window_end - self.window_start)
                if self.window_open.is_set() and window_end > self.window_start
                else None
            ),
            "unfinished_requests": self.pending,
            "not_started_requests": sum(1 for _ in self._measured),
            "metrics_before": self.before,
            "metrics_after": after,
        }
        Path(self.plan.meta_path).write_text(json.dumps(meta, indent=1))


def _standalone_plan(environment: Environment) -> RunPlan:
    from experiment import Arm, build_config
    from loadtest.plan import Overrides, build_plan

    options = environment.parsed_options
    if not environment.host:
        raise SystemExit("set the endpoint with -H/--host, e.g. -H http://127.0.0.1:8101")
    config = build_config(config_file=options.loadtest_config or None)
    arm = Arm(options.arm)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(options.records_dir or f"runs/locust-{arm.value}-{stamp}")
    run_dir.mkdir(parents=True, exist_ok=True)
    overrides = Overrides(api=options.api, max_requests=options.max_requests or None)
    return build_plan(config, arm, environment.host, run_dir, overrides)


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:  # imported as a library (no command line): nothing to set up
        return
    if (
        getattr(options, "processes", None)
        or getattr(options, "master", False)
        or getattr(options, "worker", False)
    ):
        # The shared schedule and the records live in one process; several would each send
        # the whole schedule and break "same requests in the same order" between the arms.
        raise SystemExit(
            "loadtest/locustfile.py runs in one process: drop --processes, "
            "--master and --worker (one Locust process drives 4-64 streams fine)"
        )
    if options.loadtest_plan:
        plan = RunPlan.from_json(Path(options.loadtest_plan).read_text())
    else:
        plan = _standalone_plan(environment)
    environment.host = plan.base_url
    environment.loadtest_state = _RunState(environment, plan)  # type: ignore[attr-defined]


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    state: _RunState | None = getattr(environment, "loadtest_state", None)
    if state is not None:
        state.finish("schedule_done" if state.exhausted and state.pending == 0 else "time_limit")


class StreamingUser(User):
    """Closed loop: each user sends its next request as soon as the previous one ends."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.session = StreamSession()

    def on_stop(self) -> None:
        self.session.close()

    @task
    def next_request(self) -> None:
        state: _RunState = self.environment.loadtest_state  # type: ignore[attr-defined]
        if not state.window_open.is_set():
            if not state.warmup_claimed:
                state.warmup_claimed = True
                state.run_warmup(self.session)
            else:
                state.window_open.wait()
        item = state.next_item()
        if item is None:
            if state.pending == 0 and not state.finished:
                state.finish("schedule_done")
                # Locust's --csv writer only writes every CSV_STATS_INTERVAL_SEC and not at
                # shutdown: give it one more cycle so the CSV holds every request.
                csv = getattr(self.environment.parsed_options, "csv_prefix", None)
                delay = CSV_STATS_INTERVAL_SEC + 0.2 if csv else 0.0
                gevent.spawn_later(delay, self.environment.runner.quit)  # type: ignore[union-attr]
            raise StopUser()
        if item.arrival_s is not None:  # open loop: wait for the item's arrival time
            gevent.sleep(max(0.0, state.window_start + item.arrival_s - time.perf_counter()))
        state.execute(self.session, item)
        # Not in a finally: a request killed at the time limit stays counted as unfinished.
        state.pending -= 1
