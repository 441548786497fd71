"""Integration tier: a tiny drafter x k sweep on real vLLM (CPU) servers of the miniature.

Quick mode with both drafters: the baseline, every local draft and the EAGLE3 head at k=1
and k=3, one request per prompt of 16 tokens, concurrency 1 only. Checks that the head is
served as an EAGLE3 drafter, that its acceptance per position comes from vLLM's counters,
that its step cost is measured, and that every class gets a drafter with a measured margin
over the other drafter.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from experiment import build_config
from local_run.servers import port_is_free
from tune.local import run_local_sweep
from tune.overrides import overrides_line
from tune.render.markdown import render_markdown
from tune.results import EAGLE3_CANDIDATE, drafter_of

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(1800)]

PORT = 8622  # inside the tune range (8601-8640), away from a CLI sweep and the other test


def test_drafter_sweep_on_real_vllm(tmp_path: Path) -> None:
    config = build_config(
        {
            "experiment.tuning.port": PORT,
            "experiment.tuning.drafters": "[draft-model, eagle3]",
            "experiment.tuning.concurrency": "[1]",
            "experiment.tuning.budget_s": 1500,
        }
    )
    lines: list[str] = []
    result = run_local_sweep(config, tmp_path, quick=True, log=lines.append)
    assert port_is_free("127.0.0.1", PORT), "a server was left running"
    head_log = (tmp_path / "servers" / "eagle3-k3.log").read_text()
    assert '"method":"eagle3"' in head_log.splitlines()[0]  # the recorded command line
    candidates = [*sorted(config.local.generator.drafts), EAGLE3_CANDIDATE]
    measured = {(r.setting.label, r.concurrency) for r in result.runs}
    assert {(f"{d} k={k}", 1) for d in candidates for k in (1, 3)} <= measured
    for run in result.runs:
        for name, block in run.classes.items():
            assert block.failed == 0, (run.setting.label, name, block.samples[0].error)
    classes = sorted(result.runs[0].classes)
    heads = [m for m in result.models if m.draft == EAGLE3_CANDIDATE]
    assert sorted(m.prompt_class for m in heads) == classes
    for model in heads:
        assert model.drafter == "eagle3"
        assert model.acceptance.source == "counters"  # vLLM's per-position counters
        rates = model.acceptance.per_position_rate
        assert len(rates) == 3 and all(0 <= b <= a <= 1 for a, b in itertools.pairwise(rates))
        assert [s.k for s in model.steps] == [1, 3]
        assert all(s.step_ms > 0 and s.baseline_step_ms > 0 for s in model.steps)
    scopes = [c.scope for c in result.drafter_choices]
    assert scopes == [*classes, "all"]
    for choice in result.drafter_choices:
        assert choice.drafter == drafter_of(choice.draft)
        assert choice.runner_up_drafter not in (None, choice.drafter)
        assert choice.margin is not None and choice.margin.n > 0
        assert choice.overrides == overrides_line("local", choice.draft, choice.k)
    text = render_markdown(result, [])
    assert "## Drafter per class" in text
    assert any(line.startswith("| eagle3 | eagle3 | ") for line in text.splitlines())
