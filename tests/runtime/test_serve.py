"""runtime.serve: preflight checks, printed command, exec."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm
from runtime import serve
from runtime.artifacts import MARKER_NAME, compile_fingerprint, marker_payload
from runtime.spec import ServingSpec


def _model(directory: Path, tokenizer: str = "{}") -> str:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"vocab_size": 151936}))
    (directory / "tokenizer.json").write_text(tokenizer)
    return str(directory)


def _spec(tmp_path: Path, arm: Arm = Arm.SPECULATIVE, publish: bool = True) -> ServingSpec:
    base = build_config({}).serving_spec(arm)
    spec = dataclasses.replace(
        base,
        target_model=_model(tmp_path / "target"),
        draft_model=_model(tmp_path / "draft") if base.draft_model else None,
        compiled_artifacts_path=str(tmp_path / "compiled"),
    )
    if publish:
        (tmp_path / "compiled").mkdir()
        (tmp_path / "compiled" / MARKER_NAME).write_text(marker_payload(spec, ["model.pt"]))
    return spec


def _write(tmp_path: Path, spec: ServingSpec) -> str:
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    return str(path)


def test_execs_rendered_command_with_env(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    calls = []
    code = serve.main(["--spec", _write(tmp_path, spec)], exec_fn=lambda *a: calls.append(a))
    assert code == 0
    ((python, argv, env),) = calls
    assert argv[:3] == [python, "-m", "vllm.entrypoints.openai.api_server"]
    assert "--speculative-config" in argv
    assert env["NEURON_COMPILED_ARTIFACTS"] == spec.compiled_artifacts_path
    assert "--speculative-config" in capsys.readouterr().out


def test_missing_spec_file(tmp_path: Path, capsys) -> None:
    assert serve.main(["--spec", str(tmp_path / "nope.json")]) == serve.EXIT_BAD_INPUT
    assert "check the ConfigMap mount" in capsys.readouterr().err


def test_malformed_spec(tmp_path: Path, capsys) -> None:
    path = tmp_path / "spec.json"
    path.write_text('{"service_name": "x", "typo": 1}')
    assert serve.main(["--spec", str(path)]) == serve.EXIT_BAD_INPUT
    assert "malformed" in capsys.readouterr().err


def test_missing_checkpoint(tmp_path: Path, capsys) -> None:
    spec = dataclasses.replace(_spec(tmp_path), target_model=str(tmp_path / "empty"))
    assert serve.main(["--spec", _write(tmp_path, spec)]) == serve.EXIT_BAD_INPUT
    assert "upload the checkpoint" in capsys.readouterr().err


def test_incompatible_draft(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    Path(spec.draft_model, "tokenizer.json").write_text('{"other": true}')
    assert serve.main(["--spec", _write(tmp_path, spec)]) == serve.EXIT_BAD_INPUT
    assert "different tokenizers" in capsys.readouterr().err


def test_refuses_without_precompiled_artifacts(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path, publish=False)
    assert serve.main(["--spec", _write(tmp_path, spec)]) == serve.EXIT_BAD_INPUT
    assert "run the precompile" in capsys.readouterr().err


def test_refuses_artifacts_of_other_settings(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    other_k = dataclasses.replace(spec, num_speculative_tokens=5)
    assert serve.main(["--spec", _write(tmp_path, other_k)]) == serve.EXIT_BAD_INPUT
    assert "compiled for different settings" in capsys.readouterr().err


def test_fingerprint_ignores_port_and_artifacts_location_only(tmp_path: Path) -> None:
    spec = build_config({}).serving_spec(Arm.SPECULATIVE)
    same = dataclasses.replace(spec, port=9000, compiled_artifacts_path="/elsewhere")
    assert compile_fingerprint(same) == compile_fingerprint(spec)
    for change in ({"num_speculative_tokens": 5}, {"max_num_seqs": 8}, {"draft_model": "/d2"}):
        assert compile_fingerprint(dataclasses.replace(spec, **change)) != compile_fingerprint(
            spec
        ), change


def test_per_request_metrics_leave_the_fingerprint_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # It changes what responses report, not the compiled graph: artifacts compiled before the
    # flag was rendered stay valid (runtime/artifacts.py, NOT_COMPILED_FLAGS).
    from runtime import render as render_module

    config = build_config({"experiment.serving.profile": "new-deployment"})
    spec = config.serving_spec(Arm.SPECULATIVE)
    assert "--per-request-spec-decode-metrics" in render_module.render(spec).args
    with_flag = compile_fingerprint(spec)
    monkeypatch.setattr(render_module, "per_request_spec_metrics_args", lambda generation: ())
    assert "--per-request-spec-decode-metrics" not in render_module.render(spec).args
    assert compile_fingerprint(spec) == with_flag


def test_dry_run_does_not_exec(tmp_path: Path) -> None:
    spec = _spec(tmp_path, arm=Arm.BASELINE)
    calls = []
    args = ["--spec", _write(tmp_path, spec), "--dry-run"]
    assert serve.main(args, exec_fn=lambda *a: calls.append(a)) == 0
    assert calls == []


@pytest.mark.parametrize("arm", list(Arm))
def test_local_spec_skips_artifact_checks(tmp_path: Path, arm: Arm) -> None:
    target, draft = _model(tmp_path / "t"), _model(tmp_path / "d")
    spec = build_config({}).local_serving_spec(arm, target, draft)
    calls = []
    assert serve.main(["--spec", _write(tmp_path, spec)], exec_fn=lambda *a: calls.append(a)) == 0
    assert calls[0][2]["VLLM_CPU_KVCACHE_SPACE"] == "1"
