"""Locust entry point: one arm of the comparison, with exact per-request records.

Standalone, with Locust's usual flags (``--csv``/``--html``/``--json`` keep working)::

    locust -f loadtest/locustfile.py --headless -H http://127.0.0.1:8101 -u 4 -r 4 -t 10m \\
        --arm baseline --csv runs/base --html runs/base.html

takes prompts, max_tokens, seed, ... from the experiment configuration (``-c KEY=VALUE``
as on every command, ``-c experiment_file=FILE`` for a config file: Locust's own ``--config``
is its settings file) and writes raw records to ``--records-dir`` (default
``runs/locust-<arm>-<time>/``). ``python -m loadtest run`` starts this file once per arm with
``--loadtest-plan`` instead. Either way:

- warm-up requests run first (one user, sequentially); Locust's stats are reset after them
  and the measured window starts (concurrent arms: at the instant shared with the other
  arm, loadtest/arms.py); ``/metrics`` is scraped at both ends of the window;
- users take requests from one shared schedule (same order for both arms); the run stops by
  itself when the schedule is done, or at ``-t``; each request has a timeout;
- each finished request fires one Locust request event (response time = end-to-end ms; the
  exact TTFT/ITL are in the records, Locust's own timer would stop at the headers).

Distributed (``--master --expect-workers N`` plus N ``--worker`` processes, Locust's own
engine; ``python -m loadtest run -c loadtest.workers=N`` starts them): the master holds the plan and
sends it to the workers; worker ``i`` executes the measured items ``i, i+N, ...``
(loadtest/distributed.py), streams its finished records to the master, which writes the
arm's one records file, scrapes ``/metrics`` around the window and writes the window file.
``--processes`` is refused: its forked workers would not get the plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace as dataclass_replace
from functools import partial
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC

from experiment.config import TIERED_ARM, Arm
from experiment.loading import ConfigError, add_config_arguments, config_from_arguments
from loadtest.arms import READY_POLL_S, announce_ready, shared_start
from loadtest.client import class_headers, endpoint_url, request_body, stream_request
from loadtest.distributed import (
    CLOCK_MESSAGE,
    PLAN_MESSAGE,
    RECORDS_MESSAGE,
    WARMUP_DONE_MESSAGE,
    WINDOW_OPEN_MESSAGE,
    WORKER_DONE_MESSAGE,
    ClockSample,
    WorkerWindow,
    clock_skew,
    combine_windows,
    warmup_share,
    worker_share,
)
from loadtest.open_loop import CONNECT_AHEAD_S, BurstGate, wait_until
from loadtest.plan import API, RunPlan, build_plan
from loadtest.prompts import ScheduleItem
from loadtest.records import RequestRecord
from loadtest.results import ArrivalStampCounts
from loadtest.server_latency import ServerScrape, scrape_window
from loadtest.transport import ArrivalStamps, PreparedSend, StreamSession, Transport
from loadtest.window import WindowMeta


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("loadtest (speculative decoding comparison)")
    group.add_argument(
        "--loadtest-plan", default="", help="plan JSON written by python -m loadtest"
    )
    group.add_argument(
        "--arm",
        default="baseline",
        choices=[*(arm.value for arm in Arm), TIERED_ARM],
        help="which arm this endpoint is (standalone use; tiered: the routing gateway)",
    )
    # -c KEY=VALUE as on every command of the project; Locust's own --config is its settings
    # file, so the experiment's file is -c experiment_file=FILE here.
    add_config_arguments(group, file_option=False)
    group.add_argument("--records-dir", default="", help="where records go (standalone use)")
    group.add_argument("--api", default="chat", choices=list(API))
    group.add_argument(
        "--max-requests",
        type=int,
        default=0,
        help="cap on measured requests (0: prompts x requests_per_prompt)",
    )


class _RunState:
    """The shared schedule and the measured window of one Locust process (single-process
    run, or one worker's share of a distributed run: see _WorkerState)."""

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
        self.histograms_before: ServerScrape | None = None
        # Which clock stamped the measured requests' reads (None: the bench's other clients).
        self.stamps: ArrivalStamps | None = None
        # A trace's requests due at one instant are written together (loadtest.traffic.
        # burst_writes; every user of this process shares it).
        self.bursts = BurstGate() if plan.shape.burst_writes else None
        self._records = self._open_records()

    def _open_records(self) -> Any:
        Path(self.plan.records_path).parent.mkdir(parents=True, exist_ok=True)
        return Path(self.plan.records_path).open("w")

    def _emit(self, record: RequestRecord) -> None:
        self._records.write(record.to_json() + "\n")
        self._records.flush()

    def run_warmup(self, session: Transport) -> None:
        for item in self._warmup:
            self.execute(session, item)
        self.warmup_done()

    def warmup_done(self) -> None:
        self.before, self.histograms_before = scrape_window(self.plan.base_url)
        wait_for_start(self.plan)
        runner = self.environment.runner
        if runner is not None:
            runner.stats.reset_all()  # Locust's own stats exclude the warm-up too
        self.open_window()

    def connect_early(self, session: Transport) -> None:
        """An open loop's sender, waiting for the window: its connection opened now, so the
        first requests (a trace's burst at offset 0: dozens of connects at one instant on
        one process otherwise) only take it when they are prepared."""
        if isinstance(session, StreamSession) and self.plan.shape.open_loop:
            url = endpoint_url(self.plan.base_url, self.plan.params.api)
            session.keep_open(url, self.plan.params.timeout_s)

    def open_window(self) -> None:
        # An open loop prepares each request CONNECT_AHEAD_S before its arrival: its window
        # starts that much after it opens, so a request at offset 0 (a trace's first, a burst
        # at its start) is prepared like every other instead of waiting on its connection.
        lead = CONNECT_AHEAD_S if self.plan.shape.open_loop else 0.0
        self.window_start = time.perf_counter() + lead
        self.window_start_wall = time.time() + lead
        self.cpu_start = time.process_time()
        self.window_open.set()

    def next_item(self) -> ScheduleItem | None:
        item = next(self._measured, None)
        if item is None:
            self.exhausted = True
        else:
            self.pending += 1  # counted from here: an open-loop item may wait for its arrival
        return item

    def execute(self, session: Transport, item: ScheduleItem) -> RequestRecord:
        """Send ``item`` (open loop: at its arrival time) and record it. Everything a send
        needs is made before the wait (record, encoded body, connection): between the
        arrival and the send there is only the write."""
        prompt = item.prompt
        params = self.plan.params
        record = RequestRecord(
            arm=self.plan.arm,
            index=item.index,
            prompt_id=prompt.id,
            prompt_class=prompt.prompt_class,
            warmup=item.warmup,
            input_tokens=prompt.input_tokens,
        )
        body = request_body(prompt.text, params, prompt.messages, prompt.max_tokens)
        counted = dataclass_replace(session.stamps) if isinstance(session, StreamSession) else None
        prepared: list[PreparedSend] = []
        if item.arrival_s is not None:
            arrival = self.window_start + item.arrival_s
            prepare = None
            if isinstance(session, StreamSession):
                headers = class_headers(params, prompt.prompt_class)
                url = endpoint_url(self.plan.base_url, params.api)
                prepare = partial(
                    self._prepare, session, url, body, params.timeout_s, headers, arrival, prepared
                )
            wait_until(arrival, prepare)
            if self.bursts is not None:
                self.bursts.release(arrival)  # this request and every other due now
            woke = time.perf_counter()
            sent = prepared[0].sent if prepared and prepared[0].sent is not None else woke
            record.scheduled_lag_s = max(sent - arrival, 0.0)
        stream_request(
            session, self.plan.base_url, prompt.text, params, record,
            messages=prompt.messages, max_tokens=prompt.max_tokens, body=body,
            prepared=prepared[0] if prepared else None,
        )  # fmt: skip
        if counted is not None and isinstance(session, StreamSession) and not item.warmup:
            self.stamps = self.stamps or ArrivalStamps()
            self.stamps.add(session.stamps.since(counted))
        if self.finished:  # stopped while this request ran: it counts as unfinished
            return record
        # Written after the request completed: file I/O stays off the timed path.
        self._emit(record)
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

    def _prepare(
        self,
        session: StreamSession,
        url: str,
        body: bytes,
        timeout_s: float,
        headers: dict[str, str],
        arrival: float,
        out: list[PreparedSend],
    ) -> None:
        """Shortly before ``arrival``: build the request and open its connection, enlisted
        with the burst gate when bursts are written together."""
        found = session.prepare(url, body, timeout_s, headers)
        if found is not None:
            out.append(found)
            if self.bursts is not None:
                self.bursts.enlist(arrival, found)

    def cpu_share(self, window_end: float) -> float | None:
        # Share of one core this process used in the window: near 1.0 means the load
        # generator itself was the bottleneck and its timestamps lag.
        if self.window_open.is_set() and window_end > self.window_start:
            return (time.process_time() - self.cpu_start) / (window_end - self.window_start)
        return None

    def finish(self, stopped_by: str) -> None:
        if self.finished:
            return
        self.finished = True
        window_end = time.perf_counter()
        after, histograms_after = (
            scrape_window(self.plan.base_url) if self.window_open.is_set() else (None, None)
        )
        self._records.close()
        WindowMeta(
            arm=self.plan.arm,
            stopped_by=stopped_by,
            window_start=self.window_start,
            window_start_wall=self.window_start_wall,
            window_end=window_end,
            window_s=window_end - self.window_start if self.window_open.is_set() else 0.0,
            load_generator_cpu=self.cpu_share(window_end),
            arrival_stamps=_stamp_counts(None if self.stamps is None else vars(self.stamps)),
            unfinished_requests=self.pending,
            not_started_requests=sum(1 for _ in self._measured),
            metrics_before=self.before,
            metrics_after=after,
            histograms_before=self.histograms_before,
            histograms_after=histograms_after,
        ).write(self.plan.meta_path)


# How often a worker sends its finished records to the master: what a killed worker can lose
# at most, besides its requests in flight.
RECORDS_FLUSH_S = 0.2


class _WorkerState(_RunState):
    """One worker's share of the arm: items ``index, index+count, ...``; records go to the
    master (the worker may be a pod without the run directory)."""

    def __init__(self, environment: Environment, plan: RunPlan, index: int, count: int) -> None:
        self.index = index
        self._pending_lines: list[str] = []
        self._pending_measured = 0  # of the pending lines, measured (not warm-up) records
        share = [*warmup_share(plan.schedule, index), *worker_share(plan.schedule, index, count)]
        super().__init__(environment, dataclass_replace(plan, schedule=share))
        self._flusher = gevent.spawn(self._flush_loop)

    def _open_records(self) -> Any:
        return None

    def _emit(self, record: RequestRecord) -> None:
        self._pending_lines.append(record.to_json())
        self._pending_measured += not record.warmup

    def _send(self, message: str, data: dict[str, Any]) -> None:
        runner = self.environment.runner
        assert isinstance(runner, WorkerRunner)
        runner.send_message(message, {"worker": self.index, **data})

    def flush(self) -> None:
        if self._pending_lines:
            lines, self._pending_lines = self._pending_lines, []
            measured, self._pending_measured = self._pending_measured, 0
            # The count rides with the lines: the master counts what a lost worker delivered
            # without parsing them.
            self._send(RECORDS_MESSAGE, {"lines": lines, "measured": measured})

    def _flush_loop(self) -> None:
        while not self.finished:
            gevent.sleep(RECORDS_FLUSH_S)
            self.flush()

    def warmup_done(self) -> None:
        # Only worker 0 runs the warm-up and says it is done; the others wait for the
        # master to open the window (or a warm-up could start after the window opened).
        if self.index == 0:
            self.flush()
            self._send(WARMUP_DONE_MESSAGE, {})  # the master scrapes and opens every window
        # Nothing measured leaves before the master's /metrics scrape (acceptance deltas).
        self.window_open.wait()

    def on_window_open(self, master_wall: float) -> None:
        self._send(CLOCK_MESSAGE, {"master_wall": master_wall, "worker_wall": time.time()})
        self.open_window()

    def finish(self, stopped_by: str) -> None:
        if self.finished:
            return
        self.finished = True
        self.flush()
        window = WorkerWindow(
            index=self.index,
            window_start_wall=self.window_start_wall if self.window_open.is_set() else None,
            window_end_wall=time.time(),
            cpu_share=self.cpu_share(time.perf_counter()),
            unfinished_requests=self.pending,
            not_started_requests=sum(1 for _ in self._measured),
            arrival_stamps=None if self.stamps is None else vars(self.stamps),
        )
        self._send(WORKER_DONE_MESSAGE, {"stopped_by": stopped_by, "window": vars(window)})


# How often the master looks for workers Locust has marked missing (no heartbeat for ~3 s).
LOST_WORKER_POLL_S = 0.5


class _MasterState:
    """The master of a distributed arm: sends the plan, opens the window once, writes the
    records the workers send, and writes the window file when every worker is done or lost."""

    def __init__(self, environment: Environment, plan: RunPlan, workers: int) -> None:
        self.environment = environment
        self.plan = plan
        self.workers = workers
        self.share_sizes = {i: len(worker_share(plan.schedule, i, workers)) for i in range(workers)}
        self.received: dict[int, int] = {}
        self.windows: dict[int, WorkerWindow] = {}
        self.stopped_by: dict[int, str] = {}
        self.clock: dict[int, ClockSample] = {}
        self.clients: dict[str, int] = {}  # Locust client id -> worker index
        self.before: dict[str, Any] | None = None
        self.histograms_before: ServerScrape | None = None
        self.window_open_wall: float | None = None
        self.opening = False
        self.finished = False
        Path(plan.records_path).parent.mkdir(parents=True, exist_ok=True)
        self._records = Path(plan.records_path).open("w")  # noqa: SIM115 - closed at finish
        runner = environment.runner
        assert isinstance(runner, MasterRunner)
        self.runner = runner
        handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            RECORDS_MESSAGE: self._on_records,
            WARMUP_DONE_MESSAGE: self._on_warmup_done,
            CLOCK_MESSAGE: self._on_clock,
            WORKER_DONE_MESSAGE: self._on_worker_done,
        }
        for name, handler in handlers.items():
            runner.register_message(name, _data_only(handler))
        environment.events.test_start.add_listener(self._on_test_start)

    def _on_test_start(self, **_: Any) -> None:
        # Fired by MasterRunner.start before the spawn messages: ZeroMQ keeps the order per
        # worker, so each worker has its plan before its users start.
        self.clients = dict(self.runner.worker_indexes)
        self.runner.send_message(
            PLAN_MESSAGE, {"plan": self.plan.to_json(), "workers": self.workers}
        )
        gevent.spawn(self._watch_workers)

    def _on_records(self, data: dict[str, Any]) -> None:
        index = data["worker"]
        lines = data["lines"]
        self._records.write("".join(line + "\n" for line in lines))
        self._records.flush()
        self.received[index] = self.received.get(index, 0) + data["measured"]

    def _on_warmup_done(self, data: dict[str, Any]) -> None:
        if data["worker"] != 0 or self.opening:
            return
        self.opening = True
        gevent.spawn(self._open_window)

    def _open_window(self) -> None:
        # In its own greenlet: waiting for the start instant inside a message handler would
        # hold up the workers' heartbeats.
        self.before, self.histograms_before = scrape_window(self.plan.base_url)
        wait_for_start(self.plan)
        self.runner.stats.reset_all()
        self.window_open_wall = time.time()
        self.runner.send_message(WINDOW_OPEN_MESSAGE, {"master_wall": self.window_open_wall})

    def _on_clock(self, data: dict[str, Any]) -> None:
        self.clock[data["worker"]] = ClockSample(
            sent_wall=data["master_wall"],
            worker_wall=data["worker_wall"],
            received_wall=time.time(),
        )

    def _on_worker_done(self, data: dict[str, Any]) -> None:
        window = WorkerWindow(**data["window"])
        self.windows[window.index] = window
        self.stopped_by[window.index] = data["stopped_by"]
        if len(self.windows) == self.workers and not self.finished:
            self.finish()
            _quit_after_csv(self.environment)

    def _watch_workers(self) -> None:
        while not self.finished:
            gevent.sleep(LOST_WORKER_POLL_S)
            for client_id, index in self.clients.items():
                client = self.runner.clients.get(client_id)
                if index not in self.windows and (client is None or client.state == STATE_MISSING):
                    self.windows[index] = WorkerWindow(index=index, lost=True)
                    self.stopped_by[index] = "worker_lost"
            if len(self.windows) == self.workers and not self.finished:
                self.finish()
                _quit_after_csv(self.environment)

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        for index in range(self.workers):  # the test stopped before these reported
            self.windows.setdefault(index, WorkerWindow(index=index, lost=True))
            self.stopped_by.setdefault(index, "worker_lost")
        after, histograms_after = (
            scrape_window(self.plan.base_url) if self.window_open_wall is not None else (None, None)
        )
        self._records.close()
        combined = combine_windows(list(self.windows.values()), self.share_sizes, self.received)
        causes = set(self.stopped_by.values())
        if "worker_lost" in causes:
            stopped_by = "worker_lost"
        elif causes == {"schedule_done"}:
            stopped_by = "schedule_done"
        else:
            stopped_by = "time_limit"
        skew = clock_skew(self.clock)
        start, end = combined.window_start_wall, combined.window_end_wall
        WindowMeta(
            arm=self.plan.arm,
            stopped_by=stopped_by,
            window_start_wall=start,
            window_end_wall=end,
            # Wall clock across workers: each worker's clock differs by the skew below.
            window_s=end - start if start is not None and end is not None else 0.0,
            load_generator_cpu=combined.load_generator_cpu,
            workers=self.workers,
            worker_cpu={str(i): cpu for i, cpu in combined.worker_cpu.items()},
            worker_stopped_by={str(i): cause for i, cause in sorted(self.stopped_by.items())},
            lost_workers=combined.lost_workers,
            arrival_stamps=_stamp_counts(combined.arrival_stamps),
            clock_skew_ms=skew.skew_ms if skew else None,
            clock_skew_uncertainty_ms=skew.uncertainty_ms if skew else None,
            unfinished_requests=combined.unfinished_requests,
            not_started_requests=combined.not_started_requests,
            metrics_before=self.before,
            metrics_after=after,
            histograms_before=self.histograms_before,
            histograms_after=histograms_after,
        ).write(self.plan.meta_path)


def _stamp_counts(counts: dict[str, int] | None) -> ArrivalStampCounts | None:
    return None if counts is None else ArrivalStampCounts.model_validate(counts)


def wait_for_start(plan: RunPlan) -> None:
    """Concurrent arms: hold the measured window until the arms' shared start instant."""
    if plan.start_at_wall is None:
        return
    start = plan.start_at_wall
    if plan.ready_files:
        announce_ready(plan, time.time())
        while time.time() < start:
            ready = shared_start(plan.ready_files)
            if ready is not None:
                start = min(start, ready)
                break
            gevent.sleep(READY_POLL_S)
    gevent.sleep(max(0.0, start - time.time()))


def _data_only(handler: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
    def listener(environment: Environment, msg: Message, **_: Any) -> None:
        handler(msg.data)

    return listener


# Locust's Environment has no field for a locustfile's own state: it rides on the instance
# under these names (setattr/getattr: the type checker knows Environment has no such field).
STATE_ATTRIBUTE = "loadtest_state"
MASTER_ATTRIBUTE = "loadtest_master"


def run_state(environment: Environment) -> _RunState | None:
    """This process's run state (a worker's share included); None before it exists."""
    state = getattr(environment, STATE_ATTRIBUTE, None)
    return state if isinstance(state, _RunState) else None


def _quit_after_csv(environment: Environment) -> None:
    # Locust's --csv writer only writes every CSV_STATS_INTERVAL_SEC and not at shutdown:
    # give it one more cycle so the CSV holds every request.
    csv = getattr(environment.parsed_options, "csv_prefix", None)
    delay = CSV_STATS_INTERVAL_SEC + 0.2 if csv else 0.0
    if environment.runner is not None:
        gevent.spawn_later(delay, environment.runner.quit)


def _setup_worker(environment: Environment) -> None:
    runner = environment.runner
    assert isinstance(runner, WorkerRunner)

    def on_plan(environment: Environment, msg: Message, **_: Any) -> None:
        plan = RunPlan.from_json(msg.data["plan"])
        environment.host = plan.base_url
        state = _WorkerState(environment, plan, runner.worker_index, msg.data["workers"])
        setattr(environment, STATE_ATTRIBUTE, state)

    def on_window_open(environment: Environment, msg: Message, **_: Any) -> None:
        state = run_state(environment)
        if isinstance(state, _WorkerState):
            state.on_window_open(msg.data["master_wall"])

    runner.register_message(PLAN_MESSAGE, on_plan)
    runner.register_message(WINDOW_OPEN_MESSAGE, on_window_open)

    # Locust fires "quitting" in reverse order of registration, so this runs before the
    # runner's own listener tells the master this worker quit (SIGTERM, Ctrl-C): the
    # records measured so far reach the master first.
    @environment.events.quitting.add_listener
    def _flush_before_quit(environment: Environment, **_: Any) -> None:
        state = run_state(environment)
        if isinstance(state, _WorkerState):
            state.finish("stopped")


def _standalone_plan(environment: Environment) -> RunPlan:
    options = environment.parsed_options
    if options is None:
        raise SystemExit("loadtest/locustfile.py needs Locust's command line options")
    if not environment.host:
        raise SystemExit("set the endpoint with -H/--host, e.g. -H http://127.0.0.1:8101")
    try:
        config = config_from_arguments(options, file_option=False)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    arm = options.arm
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(options.records_dir or f"runs/locust-{arm}-{stamp}")
    run_dir.mkdir(parents=True, exist_ok=True)
    return build_plan(
        config, arm, environment.host, run_dir,
        max_requests=options.max_requests or None, api=options.api,
    )  # fmt: skip


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:  # imported as a library (no command line): nothing to set up
        return
    if getattr(options, "processes", None):
        # Forked workers would not get the plan from the master's command line.
        raise SystemExit(
            "loadtest/locustfile.py: drop --processes; run --master --expect-workers N and N "
            "--worker processes (python -m loadtest run -c loadtest.workers=N does)"
        )
    if getattr(options, "worker", False):
        _setup_worker(environment)  # the plan arrives from the master
        return
    if options.loadtest_plan:
        plan = RunPlan.from_json(Path(options.loadtest_plan).read_text())
    else:
        plan = _standalone_plan(environment)
    environment.host = plan.base_url
    if getattr(options, "master", False):
        master = _MasterState(environment, plan, options.expect_workers)
        setattr(environment, MASTER_ATTRIBUTE, master)
        return
    setattr(environment, STATE_ATTRIBUTE, _RunState(environment, plan))


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    state = run_state(environment)
    if state is not None:
        state.finish("schedule_done" if state.exhausted and state.pending == 0 else "time_limit")
    master = getattr(environment, MASTER_ATTRIBUTE, None)
    if isinstance(master, _MasterState):
        master.finish()


class StreamingUser(User):
    """Closed loop: each user sends its next request as soon as the previous one ends."""

    wait_time = constant(0)
    session: Transport  # StreamSession; the bench swaps in other clients to compare them

    def on_start(self) -> None:
        self.session = StreamSession()

    def on_stop(self) -> None:
        self.session.close()

    @task
    def next_request(self) -> None:
        state = run_state(self.environment)
        if state is None:
            raise RuntimeError("no load-test plan in this Locust process (see _on_init)")
        if not state.window_open.is_set():
            if not state.warmup_claimed:
                state.warmup_claimed = True
                state.run_warmup(self.session)
            else:
                state.connect_early(self.session)
                state.window_open.wait()
        item = state.next_item()
        if item is None:
            if state.pending == 0 and not state.finished:
                state.finish("schedule_done")
                if not isinstance(state, _WorkerState):  # a worker's master ends the run
                    _quit_after_csv(self.environment)
            raise StopUser()
        state.execute(self.session, item)  # open loop: at the item's arrival time
        # Not in a finally: a request killed at the time limit stays counted as unfinished.
        state.pending -= 1
