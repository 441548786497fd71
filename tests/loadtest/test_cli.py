"""Command-line entry points: clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

from loadtest.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_bad_input_exits_2_with_what_to_change(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "not a load-test run directory" in capsys.readouterr().err
    out = tmp_path / "never"
    bad_url = ["run", "--baseline", "localhost:1", "--speculative", "http://x", "--out", str(out)]
    assert main(bad_url) == 2
    assert "must start with http://" in capsys.readouterr().err
    assert not out.exists()  # rejected input leaves nothing behind
    assert main(["run", "--speculative", "http://x"]) == 2
    assert "--baseline URL" in capsys.readouterr().err
    code = main(["run", "--local", "--set", "loadtest.concurrency=0", "--no-cloudwatch"])
    assert code == 2 and "loadtest.concurrency" in capsys.readouterr().err
    missing = str(tmp_path / "absent.jsonl")
    code = main(["run", "--local", "--prompts", missing, "--out", str(tmp_path / "r")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_local_flag_uses_the_local_scale_and_explicit_flags_win() -> None:
    from experiment import build_config
    from loadtest.__main__ import _overrides, _parser
    from loadtest.plan import Overrides

    config = build_config({})
    local = _overrides(_parser().parse_args(["run", "--local"]), config)
    assert (local.max_tokens, local.concurrency, local.requests_per_prompt) == (
        config.local.max_tokens,
        config.local.concurrency,
        config.local.requests_per_prompt,
    )
    assert Overrides.local_scale(config).max_tokens == config.local.max_tokens
    explicit = _overrides(_parser().parse_args(["run", "--local", "--max-tokens", "9"]), config)
    assert explicit.max_tokens == 9
    plain = _overrides(_parser().parse_args(["run"]), config)
    assert plain.max_tokens is None and plain.concurrency is None
