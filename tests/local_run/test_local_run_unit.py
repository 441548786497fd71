"""The local run's wiring without servers: rendered arm commands, headline, CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm
from loadtest.metrics import DISTRIBUTIONS, describe
from loadtest.render.headline import headline, headline_text
from loadtest.results import (
    Acceptance,
    ArmSummary,
    Comparison,
    LoadShapeInfo,
    Lossless,
    MetricBlock,
    RequestInfo,
    RunInfo,
    RunSummary,
    SloInfo,
    Speedups,
    StatSpeedups,
    TieredComparison,
    TieredRouting,
)
from local_run import servers as servers_module
from local_run.__main__ import main
from local_run.arms import arm_commands, arm_servers, write_commands
from local_run.run import _problems, new_run_dir
from local_run.servers import OMP_BIND_ENV, Server, ServerError, core_shares, free_port
from runtime.render import VllmCommand

TARGET_DIR, DRAFT_DIR = Path("/models/abc/target"), Path("/models/abc/draft")


def test_arms_differ_only_in_port_and_speculative_flags() -> None:
    config = build_config({})
    commands = arm_commands(config, TARGET_DIR, DRAFT_DIR)
    base, sd = commands[Arm.BASELINE].flags(), commands[Arm.SPECULATIVE].flags()
    # The draft, and each request's acceptance in its response (vLLM refuses the flag
    # without a draft: runtime/render.py).
    assert set(sd) - set(base) == {"--speculative-config", "--per-request-spec-decode-metrics"}
    assert sd["--per-request-spec-decode-metrics"] == "summary"
    assert {k for k in base if base[k] != sd[k]} == {"--port"}
    assert base["--model"] == "/models/abc/target"
    assert '"model":"/models/abc/draft"' in (sd["--speculative-config"] or "")
    assert '"method":"draft_model"' in (sd["--speculative-config"] or "")
    assert base["--dtype"] == config.local.dtype
    assert commands[Arm.BASELINE].env == commands[Arm.SPECULATIVE].env
    assert commands[Arm.BASELINE].env["VLLM_CPU_KVCACHE_SPACE"] == str(config.local.cpu_kvcache_gib)


def test_both_local_arms_prefill_every_request_as_the_trn2_arms_do() -> None:
    # vLLM V1 caches prefixes by default; the published trn2 arms (the fork's V0 engine) did
    # not, and with a cache a repeated prompt's TTFT would skip its prefill in both arms.
    commands = arm_commands(build_config({}), TARGET_DIR, DRAFT_DIR)
    for command in commands.values():
        assert "--no-enable-prefix-caching" in command.flags()
        assert "--enable-prefix-caching" not in command.flags()


def test_servers_listen_on_the_configured_ports_and_log_per_arm(tmp_path: Path) -> None:
    config = build_config(
        {"experiment.local.baseline_port": 18001, "experiment.local.speculative_port": 18002}
    )
    servers = arm_servers(config, TARGET_DIR, DRAFT_DIR, tmp_path)
    assert [(s.name, s.port) for s in servers] == [("baseline", 18001), ("speculative", 18002)]
    assert [s.log_path for s in servers] == [
        tmp_path / "baseline.log",
        tmp_path / "speculative.log",
    ]
    assert all(s.served_model_name == config.serving.target_model for s in servers)


@pytest.mark.parametrize(
    ("usable", "expected"),
    [({1, 0}, ["0", "1"]), ({3, 2, 5, 4, 6}, ["2,3,4", "5,6"]), ({0, 1, 2, 3}, ["0,1", "2,3"])],
)
def test_each_server_computes_on_its_own_cores_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, usable: set[int], expected: list[str]
) -> None:
    # vLLM's own binding put both servers' workers on core 0 of 2, where the one that had just
    # served busy-waited for a second while the other's first token waited (docs/local-run.md).
    monkeypatch.setattr(servers_module.os, "sched_getaffinity", lambda pid: usable)
    config = build_config({})
    assert config.local.server_binding == "apart"
    servers = arm_servers(config, TARGET_DIR, DRAFT_DIR, tmp_path)
    assert all(s.cores is None for s in servers)  # the API servers go where the kernel puts them
    assert [s.command.env[OMP_BIND_ENV] for s in servers] == expected
    # Everything else of the rendered commands is untouched.
    rendered = arm_commands(config, TARGET_DIR, DRAFT_DIR)
    for server, command in zip(servers, rendered.values(), strict=True):
        assert server.command.args == command.args
        assert {k: v for k, v in server.command.env.items() if k != OMP_BIND_ENV} == command.env
    # The run's commands.json records the binding, to reproduce the run.
    write_commands(servers, tmp_path / "commands.json")
    recorded = json.loads((tmp_path / "commands.json").read_text())
    assert [recorded[name]["env"][OMP_BIND_ENV] for name in ("baseline", "speculative")] == expected


@pytest.mark.parametrize(
    ("overrides", "isolated"),
    [
        ({"experiment.local.tiered": "true"}, True),  # the default with the tiered arm
        ({"experiment.local.cpu_binding": "isolated"}, True),
        ({"experiment.local.tiered": "true", "experiment.local.cpu_binding": "apart"}, False),
    ],
)
def test_isolated_binding_confines_each_whole_server_to_its_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, str], isolated: bool
) -> None:
    # The tiered arm switches servers at every class change: with only the compute bound, a
    # baseline request right after a speculative one ran 10-45% slower (docs/local-run.md).
    monkeypatch.setattr(servers_module.os, "sched_getaffinity", lambda pid: {0, 1})
    servers = arm_servers(build_config(overrides), TARGET_DIR, DRAFT_DIR, tmp_path)
    assert [s.command.env[OMP_BIND_ENV] for s in servers] == ["0", "1"]
    assert [s.cores for s in servers] == ([[0], [1]] if isolated else [None, None])
    write_commands(servers, tmp_path / "commands.json")
    recorded = json.loads((tmp_path / "commands.json").read_text())
    assert [recorded[name].get("cores") for name in ("baseline", "speculative")] == [
        s.cores for s in servers
    ]


@pytest.mark.process
def test_an_isolated_server_and_its_children_run_on_its_cores(tmp_path: Path) -> None:
    # The affinity is set in the child before exec and inherited by what it starts, as vLLM's
    # engine core and worker are started by its API server.
    core = sorted(servers_module.os.sched_getaffinity(0))[-1]
    (tmp_path / "affinity_probe.py").write_text(
        "import os, subprocess, sys\n"
        "print(sorted(os.sched_getaffinity(0)), flush=True)\n"
        "subprocess.run([sys.executable, '-c', "
        "'import os; print(sorted(os.sched_getaffinity(0)))'], check=True)\n"
    )
    command = VllmCommand(module="affinity_probe", args=(), env={"PYTHONPATH": str(tmp_path)})
    server = Server(
        name="baseline",
        command=command,
        host="127.0.0.1",
        port=free_port(),
        served_model_name="m",
        log_path=tmp_path / "server.log",
        cores=[core],
    )
    server.start()
    assert server.process is not None
    assert server.process.wait(timeout=30) == 0
    assert server.log_path.read_text().splitlines()[1:] == [f"[{core}]", f"[{core}]"]


def test_shared_binding_leaves_the_cores_to_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servers_module.os, "sched_getaffinity", lambda pid: {0, 1})
    config = build_config({"experiment.local.cpu_binding": "shared"})
    servers = arm_servers(config, TARGET_DIR, DRAFT_DIR, tmp_path)
    assert all(OMP_BIND_ENV not in s.command.env for s in servers)


def test_apart_on_one_core_names_the_setting_to_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servers_module.os, "sched_getaffinity", lambda pid: {3})
    with pytest.raises(ServerError, match=r"local\.cpu_binding=shared"):
        arm_servers(build_config({}), TARGET_DIR, DRAFT_DIR, tmp_path)


def test_core_shares_are_contiguous_disjoint_and_cover_every_core() -> None:
    for count in range(1, 9):
        for parts in range(1, count + 1):
            shares = core_shares(range(10, 10 + count), parts)
            assert len(shares) == parts and all(shares)
            assert [core for share in shares for core in share] == list(range(10, 10 + count))
            sizes = [len(share) for share in shares]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def summary(failed: int = 0) -> RunSummary:
    """A run summary with the numbers the headline reads (the rest empty)."""
    none = describe([])

    def arm(name: str, acceptance: Acceptance) -> ArmSummary:
        overall = MetricBlock(
            requests=16,
            succeeded=16 - failed,
            failed=failed,
            failures_by_reason={"timeout": failed} if failed else {},
            **dict.fromkeys(DISTRIBUTIONS, none),
        )
        return ArmSummary(
            label=name,
            url="",
            stopped_by="schedule_done",
            arrival_lag_ms=none,
            overall=overall,
            acceptance=acceptance,
        )

    def speedups(e2e: float, tpot: float, ttft: float | None = None) -> Speedups:
        blocks = {name: StatSpeedups() for name in DISTRIBUTIONS if name != "tokens_per_chunk"}
        blocks.update(
            e2e_ms=StatSpeedups(mean=e2e),
            tpot_ms=StatSpeedups(mean=tpot),
            ttft_ms=StatSpeedups(mean=ttft),
        )
        return Speedups(**blocks)

    run = RunInfo(
        started_at="",
        model="m",
        urls={},
        variant_labels={},
        request=RequestInfo(
            model="m",
            max_tokens=8,
            temperature=0.0,
            ignore_eos=True,
            seed=0,
            api="chat",
            timeout_s=1.0,
        ),
        load_shape=LoadShapeInfo(concurrency=1, max_duration_s=1.0),
        measured_requests=16,
        warmup_requests=0,
        seed=0,
        slo=SloInfo(ttft_ms=1.0, tpot_ms=1.0, e2e_ms=1.0),
    )
    overall = speedups(0.5, 0.25, 2.0)
    overall.output_throughput_tok_s = 0.55
    return RunSummary(
        run=run,
        arms={
            "baseline": arm("Base", Acceptance(available=False, reason="no counters")),
            "speculative": arm(
                "SD", Acceptance(available=True, acceptance_rate=0.4, mean_acceptance_length=3.8)
            ),
        },
        speedup=Comparison(overall=overall, by_class={"structured": speedups(0.6, 0.3, 0.9)}),
        lossless=Lossless(
            applicable=True, prompts_compared=16, exact_matches=16, exact_match_rate=1.0
        ),
    )


def test_headline_pulls_the_numbers_the_report_must_state() -> None:
    numbers = headline(summary(), {"structured": 0.5, "open_ended": None})
    assert numbers.acceptance_rate == 0.4
    assert numbers.speedup_e2e_mean == 0.5
    assert numbers.speedup_ttft_mean == 2.0
    assert numbers.speedup_output_throughput == 0.55
    assert numbers.lossless_exact_match_rate == 1.0
    text = headline_text(numbers)
    assert "acceptance rate: 40.0%" in text
    assert "structured prompts, one class at a time: 50.0%" in text
    assert "open_ended prompts, one class at a time: n/a" in text
    assert "E2E mean 0.50x, TTFT mean 2.00x, TPOT mean 0.25x" in text
    # The published comparison reads TTFT next to E2E, per prompt class too.
    assert numbers.speedup_by_class["structured"].ttft_mean == 0.9
    assert "structured prompts: E2E mean 0.60x, TTFT mean 0.90x, TPOT mean 0.30x" in text
    assert "100% of 16 prompts" in text


def test_missing_numbers_read_not_available() -> None:
    data = summary()
    data.arms["speculative"].acceptance = Acceptance(available=False, reason="none")
    data.speedup = Comparison()
    numbers = headline(data)
    assert numbers.acceptance_note == "none"
    text = headline_text(numbers)
    assert "acceptance rate: n/a" in text and "E2E mean n/a" in text
    assert "one class at a time" not in text  # no per-class probe: no per-class lines


def test_failed_requests_are_problems() -> None:
    assert _problems(summary()) == []
    problems = _problems(summary(failed=2))
    assert problems[0].startswith("baseline: 14 of 16 requests succeeded")


def test_any_lossless_mismatch_is_a_local_problem() -> None:
    """The local CPU run is bit-exact: its bar is 100% exact, whatever the Neuron tolerance."""
    data = summary()
    data.lossless = data.lossless.model_copy(
        update={"applicable": True, "prompts_compared": 16, "exact_matches": 15}
    )
    assert _problems(data) == [
        "lossless: 15 of 16 prompts exact; the local run is bit-exact and must match every prompt"
    ]
    data.lossless = data.lossless.model_copy(update={"exact_matches": 16})
    assert _problems(data) == []


def test_the_tiered_arms_failures_and_lossless_mismatches_are_problems() -> None:
    """With local.tiered the gateway's arm counts like the two: a failed request or an output
    that differs from the baseline's fails the local run."""
    data = summary()
    failing = summary(failed=1).arms["baseline"].model_copy(update={"label": "Tiered"})
    data.arms["tiered"] = failing
    data.tiered = TieredComparison(
        routing=TieredRouting(class_header="x-prompt-class", speculative_classes=["structured"]),
        lossless=data.lossless.model_copy(update={"exact_matches": 15}),
        unpaired=1,
    )
    assert _problems(data) == [
        "tiered: 15 of 16 requests succeeded ({'timeout': 1})",
        "tiered lossless: 15 of 16 prompts exact; the local run is bit-exact and must match "
        "every prompt",
    ]
    data.arms["tiered"] = data.arms["baseline"]
    data.tiered.lossless.exact_matches = 16
    assert _problems(data) == []


def test_run_dirs_are_unique(tmp_path: Path) -> None:
    config = build_config({"experiment.local.runs_dir": str(tmp_path)})
    first, second = new_run_dir(config), new_run_dir(config)
    assert first != second and first.parent == second.parent == tmp_path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "experiment.local.max_tokens"], "write it as key=value"),
        (["-c", "experiment.local.max_tokens=0"], "local.max_tokens"),
        (["-c", "experiment.local.no_such_key=1"], "unknown key"),
    ],
)
def test_bad_overrides_exit_2_with_a_hint(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
