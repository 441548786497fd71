"""Integration tier: the local target served by real vLLM (CPU) with the EAGLE3 head as its
drafter (local.drafter eagle3), beside the baseline: greedy output equals the baseline's
(lossless), and the speculative server's acceptance counters, per position too, moved.

Its own pair of servers on ephemeral ports, started only for this module (the session's
draft-model pair is the conftest's)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from loadtest.acceptance import ACCEPTED, DRAFT_TOKENS, DRAFTS, PER_POSITION
from loadtest.prompts import Prompt, load_prompts
from local_run import eagle3
from local_run.arms import arm_servers
from local_run.models import TRAINED_TARGET, ModelPair, ensure_models, greedy_continuations
from local_run.servers import LocalServers, free_port, sigterm_raises
from local_run.smoke import ArmCheck, check_arm, request_params

# Generates the default pair and trains the head on a fresh machine, then serves both arms.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
PROMPTS_PER_CLASS = 3
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def eagle3_config(tmp_path_factory: pytest.TempPathFactory) -> ExperimentConfig:
    baseline_port = free_port()
    speculative_port = free_port()
    while speculative_port == baseline_port:
        speculative_port = free_port()
    return build_config(
        {
            "experiment.local.drafter": "eagle3",
            "experiment.local.baseline_port": baseline_port,
            "experiment.local.speculative_port": speculative_port,
            "experiment.local.runs_dir": str(tmp_path_factory.mktemp("runs")),
            "experiment.local.max_tokens": MAX_TOKENS,
        }
    )


@pytest.fixture(scope="module")
def eagle3_pair(eagle3_config: ExperimentConfig) -> ModelPair:
    # The default models_dir: the target `make local` uses, plus its cached head.
    return ensure_models(eagle3_config.local)


@pytest.fixture(scope="module")
def eagle3_servers(
    eagle3_config: ExperimentConfig,
    eagle3_pair: ModelPair,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[Arm, str]]:
    logs = tmp_path_factory.mktemp("eagle3-server-logs")
    servers = arm_servers(eagle3_config, eagle3_pair.target_dir, eagle3_pair.draft_dir, logs)
    with (
        sigterm_raises(),
        LocalServers(servers, eagle3_config.local.startup_timeout_s, print) as running,
    ):
        yield {Arm(s.name): s.url for s in running.servers}


@pytest.fixture(scope="module")
def chosen(eagle3_config: ExperimentConfig) -> list[Prompt]:
    """A few prompts of each class from the local run's suite."""
    files = [*eagle3_config.loadtest.prompts.files, *eagle3_config.local.extra_prompt_files]
    prompts = load_prompts(files)
    return [
        prompt
        for _, group in itertools.groupby(
            sorted(prompts, key=lambda p: p.prompt_class), key=lambda p: p.prompt_class
        )
        for prompt in list(group)[:PROMPTS_PER_CLASS]
    ]


@pytest.fixture(scope="module")
def checks(
    eagle3_config: ExperimentConfig, eagle3_servers: dict[Arm, str], chosen: list[Prompt]
) -> dict[str, dict[Arm, ArmCheck]]:
    """The chosen prompts, streamed by both arms one after the other."""
    params = request_params(eagle3_config, MAX_TOKENS)
    return {
        f"{prompt.prompt_class}:{prompt.id}": {
            arm: check_arm(arm, url, prompt.text, params, index)
            for arm, url in eagle3_servers.items()
        }
        for index, prompt in enumerate(chosen)
    }


def test_the_speculative_arm_serves_the_eagle3_head(
    eagle3_config: ExperimentConfig, eagle3_pair: ModelPair, tmp_path: Path
) -> None:
    servers = arm_servers(eagle3_config, eagle3_pair.target_dir, eagle3_pair.draft_dir, tmp_path)
    speculative = next(s for s in servers if s.name == Arm.SPECULATIVE.value)
    assert '"method":"eagle3"' in (speculative.command.flags()["--speculative-config"] or "")
    assert eagle3_pair.manifest["draft"]["kind"] == "eagle3"


def test_eagle3_output_equals_the_baselines_greedy_output(
    checks: dict[str, dict[Arm, ArmCheck]],
) -> None:
    assert len(checks) == 2 * PROMPTS_PER_CLASS
    for prompt_id, by_arm in checks.items():
        for arm, check in by_arm.items():
            assert check.record.ok, (prompt_id, arm, check.record.error_detail)
            assert check.record.output_tokens == MAX_TOKENS, (prompt_id, arm)
        baseline, speculative = by_arm[Arm.BASELINE].record, by_arm[Arm.SPECULATIVE].record
        assert speculative.text == baseline.text, prompt_id


def test_spec_decode_counters_moved_per_position_on_the_eagle3_arm_only(
    checks: dict[str, dict[Arm, ArmCheck]], eagle3_config: ExperimentConfig
) -> None:
    k = eagle3_config.local_serving_spec(Arm.SPECULATIVE, "t", "d").num_speculative_tokens
    assert k is not None
    first, *_, last = checks.values()
    before = first[Arm.SPECULATIVE].counters_before or {}
    after = last[Arm.SPECULATIVE].counters_after or {}
    drafts = after[DRAFTS] - before.get(DRAFTS, 0.0)
    draft_tokens = after[DRAFT_TOKENS] - before.get(DRAFT_TOKENS, 0.0)
    accepted = after[ACCEPTED] - before.get(ACCEPTED, 0.0)
    assert drafts > 0 and 0 < draft_tokens <= drafts * k
    assert 0 < accepted <= draft_tokens
    per_position = [
        after[PER_POSITION].get(i, 0.0) - before.get(PER_POSITION, {}).get(i, 0.0) for i in range(k)
    ]
    assert per_position[0] > 0
    assert all(a >= b for a, b in itertools.pairwise(per_position))  # a chain only shortens
    assert sum(per_position) == pytest.approx(accepted)
    for by_arm in checks.values():
        assert not by_arm[Arm.BASELINE].spec_decode_exported


def _served_by_position(
    checks: dict[str, dict[Arm, ArmCheck]], k: int
) -> tuple[float, list[float]]:
    first, *_, last = checks.values()
    before = first[Arm.SPECULATIVE].counters_before or {}
    after = last[Arm.SPECULATIVE].counters_after or {}
    drafts = after[DRAFTS] - before.get(DRAFTS, 0.0)
    accepted = [
        after[PER_POSITION].get(i, 0.0) - before.get(PER_POSITION, {}).get(i, 0.0) for i in range(k)
    ]
    return drafts, [a / drafts for a in accepted]


def test_served_acceptance_per_position_equals_the_offline_replay(
    checks: dict[str, dict[Arm, ArmCheck]],
    chosen: list[Prompt],
    eagle3_config: ExperimentConfig,
    eagle3_pair: ModelPair,
) -> None:
    """vLLM feeds the head what it was trained on: the served acceptance per draft position
    over these requests equals the same speculation replayed offline on the target's greedy
    answers (``eagle3.replay_acceptance``: aux states in vLLM's layer numbering, the token
    after the anchor, RoPE positions, the head's own state fed forward). A token shifted by
    one leaves the output lossless but the first-position rate at less than half the
    replay's (replayed on the structured suite); an aux layer off by one is not caught
    (adjacent layers' residual streams differ little: the replay barely moves)."""
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    k = eagle3_config.local_serving_spec(Arm.SPECULATIVE, "t", "d").num_speculative_tokens
    assert k is not None
    drafts, served = _served_by_position(checks, k)
    tokenizer = AutoTokenizer.from_pretrained(eagle3_pair.target_dir)
    teacher = Qwen3ForCausalLM.from_pretrained(eagle3_pair.root / TRAINED_TARGET).float().eval()
    head = eagle3.load_head(eagle3_pair.draft_dir)
    states = eagle3.TargetStates(teacher, eagle3_pair.manifest["draft"]["aux_layer_ids"])
    sequences = []
    for prompt in chosen:
        text = str(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt.text}],
                add_generation_prompt=True,
                tokenize=False,
            )
        )
        (tokens,) = greedy_continuations(teacher, tokenizer, [text], MAX_TOKENS)
        sequences.append((tokens, len(tokens) - MAX_TOKENS))
    replay = eagle3.replay_acceptance(head, states, sequences, k)
    assert replay["drafts"] == pytest.approx(drafts, rel=0.1)
    for position, (online, offline) in enumerate(
        zip(served, replay["accepted_by_position"], strict=True)
    ):
        assert abs(online - offline) <= 0.06, (position, served, replay)
