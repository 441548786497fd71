"""``python -m experiment pins`` end to end against loopback servers that answer as the hub API,
the GitHub release API and the asset download do, with EKS behind botocore's Stubber: every
pin resolved and recorded with its source, and every failure (unreachable, 404, a digest
mismatch, no default version, no credentials) reported with nothing written."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from experiment import build_config
from experiment.__main__ import main
from experiment.config.gateway_plugin import (
    GATEWAY_API_PLUGIN_ASSET,
    GATEWAY_API_PLUGIN_REPO,
    GATEWAY_API_PLUGIN_VERSION,
)
from experiment.pins import record as pins

pytestmark = pytest.mark.process  # loopback HTTP servers

TARGET, DRAFT = "Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B"
COMMITS = {TARGET: "a" * 40, DRAFT: "b" * 40}
S3_CSI, CLOUDWATCH = "aws-mountpoint-s3-csi-driver", "amazon-cloudwatch-observability"
DEFAULTS = {S3_CSI: "v2.2.1-eksbuild.1", CLOUDWATCH: "v4.5.0-eksbuild.2"}
ASSET = b"\x7fELF plugin binary" * 1000
ASSET_SHA256 = hashlib.sha256(ASSET).hexdigest()
RELEASE_PATH = f"/repos/{GATEWAY_API_PLUGIN_REPO}/releases/tags/{GATEWAY_API_PLUGIN_VERSION}"
DOWNLOAD_PATH = f"/download/{GATEWAY_API_PLUGIN_VERSION}/{GATEWAY_API_PLUGIN_ASSET}"


def model_info(model: str, sha: str) -> dict[str, Any]:
    # GET /api/models/{repo}/revision/{revision} as the hub answers it (huggingface/
    # huggingface_hub src/huggingface_hub/hf_api.py model_info -> ModelInfo: id, sha, ...).
    return {
        "_id": "0" * 24,
        "id": model,
        "modelId": model,
        "author": model.split("/")[0],
        "sha": sha,
        "lastModified": "2026-07-01T00:00:00.000Z",
        "private": False,
        "disabled": False,
        "gated": False,
        "pipeline_tag": "text-generation",
        "library_name": "transformers",
        "tags": ["transformers", "safetensors", "qwen3"],
        "downloads": 1000,
        "likes": 10,
        "siblings": [{"rfilename": "config.json"}, {"rfilename": "model.safetensors"}],
        "createdAt": "2026-04-29T00:00:00.000Z",
    }


def release(base: str, digest: str | None) -> dict[str, Any]:
    # GET /repos/{owner}/{repo}/releases/tags/{tag} (docs.github.com/en/rest/releases/releases,
    # API version 2022-11-28): assets[] with name, browser_download_url and digest.
    asset = {
        "url": f"{base}/repos/{GATEWAY_API_PLUGIN_REPO}/releases/assets/1",
        "id": 1,
        "node_id": "RA_1",
        "name": GATEWAY_API_PLUGIN_ASSET,
        "label": "",
        "content_type": "application/octet-stream",
        "state": "uploaded",
        "size": len(ASSET),
        "digest": digest,
        "download_count": 3,
        "created_at": "2026-06-26T00:00:00Z",
        "updated_at": "2026-06-26T00:00:00Z",
        "browser_download_url": f"{base}{DOWNLOAD_PATH}",
    }
    other = {
        **asset,
        "id": 2,
        "name": "gatewayapi-plugin-darwin-arm64",
        "digest": "sha256:" + "c" * 64,
    }
    return {
        "url": f"{base}{RELEASE_PATH}",
        "html_url": f"https://github.com/{GATEWAY_API_PLUGIN_REPO}/releases/tag/v0.15.0",
        "id": 7,
        "tag_name": GATEWAY_API_PLUGIN_VERSION,
        "name": GATEWAY_API_PLUGIN_VERSION,
        "draft": False,
        "prerelease": False,
        "created_at": "2026-06-26T00:00:00Z",
        "published_at": "2026-06-26T00:00:00Z",
        "assets": [other, asset],
    }


@dataclass
class Upstream:
    """One loopback server for the hub API, the release API and the asset download."""

    base: str = ""
    commits: dict[str, str] = field(default_factory=lambda: dict(COMMITS))
    digest: str | None = f"sha256:{ASSET_SHA256}"
    asset: bytes = ASSET
    paths: list[str] = field(default_factory=list)

    def answer(self, path: str) -> tuple[int, bytes]:
        self.paths.append(path)
        for model, sha in self.commits.items():
            if path in (
                f"/api/models/{model}/revision/main",
                f"/api/models/{model}/revision/{sha}",
            ):
                return 200, json.dumps(model_info(model, sha)).encode()
        if path == RELEASE_PATH:
            return 200, json.dumps(release(self.base, self.digest)).encode()
        if path == DOWNLOAD_PATH:
            return 200, self.asset
        return 404, b'{"error": "Repository not found"}'


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    state = Upstream()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = state.answer(self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def addon_page(addon: str, default: str | None) -> dict[str, Any]:
    # EKS DescribeAddonVersions (boto/botocore botocore/data/eks/2017-11-01/service-2.json).
    versions = [("v9.9.9-eksbuild.1", False)] + ([(default, True)] if default else [])
    return {
        "addons": [
            {
                "addonName": addon,
                "type": "observability",
                "owner": "aws",
                "publisher": "eks",
                "addonVersions": [
                    {
                        "addonVersion": version,
                        "architecture": ["amd64"],
                        "computeTypes": ["ec2"],
                        "compatibilities": [
                            {
                                "clusterVersion": "1.35",
                                "platformVersions": ["*"],
                                "defaultVersion": is_default,
                            }
                        ],
                        "requiresConfiguration": False,
                        "requiresIamPermissions": False,
                    }
                    for version, is_default in versions
                ],
            }
        ]
    }


def eks(defaults: dict[str, str | None] | None = None) -> Any:
    """region -> a stubbed EKS client answering once per add-on, in the command's order."""

    def client(region: str) -> Any:
        assert region == "us-east-2"
        stubbed = boto3.client(
            "eks", region_name=region, aws_access_key_id="x", aws_secret_access_key="x"
        )
        stubber = Stubber(stubbed)
        for addon, default in (defaults or DEFAULTS).items():
            stubber.add_response(
                "describe_addon_versions",
                addon_page(addon, default),
                {"addonName": addon, "kubernetesVersion": "1.35"},
            )
        stubber.activate()
        return stubbed

    return client


def pins_cmd(upstream: Upstream, file: Path, *extra: str, defaults: Any = None) -> int:
    argv = ["pins", "--context-file", str(file), "--github-api", upstream.base]
    argv += ["--hub-api", upstream.base, *extra]
    return main(argv, eks_client=eks(defaults))


def test_every_pin_is_resolved_recorded_with_its_source_and_read_by_synth(
    upstream: Upstream, tmp_path: Path, capsys
) -> None:
    file = tmp_path / "cdk.context.json"
    file.write_text(json.dumps({"availability-zones:account=1:region=r": ["r-a"]}))
    assert pins_cmd(upstream, file) == 0
    out = capsys.readouterr().out
    assert f'hub_revisions["{TARGET}"] = {"a" * 40}' in out
    assert f"GET {upstream.base}/api/models/{TARGET}/revision/main -> sha" in out
    assert f"gateway_api_plugin_sha256 = {ASSET_SHA256}" in out
    assert f"release API: GET {upstream.base}{RELEASE_PATH} -> assets[" in out
    assert "s3_csi_addon_version = v2.2.1-eksbuild.1" in out and "defaultVersion" in out
    assert DOWNLOAD_PATH not in upstream.paths  # the API's digest: no download
    written = json.loads(file.read_text())
    assert written["availability-zones:account=1:region=r"] == ["r-a"]  # CDK's lookups kept
    recorded = written[pins.PINS_KEY]
    assert recorded["eks_addons"]["kubernetes_version"] == "1.35"
    assert recorded["hub"]["endpoint"] == "https://huggingface.co"
    assert recorded["gateway_api_plugin"]["method"] == "release-api-digest"
    # What synth reads from it (the CDK CLI passes the file's keys as context).
    config = build_config({pins.PINS_KEY: recorded}, for_eks=True)
    assert config.model_store.hub_revisions == COMMITS
    assert config.cluster.cloudwatch_addon_version == DEFAULTS[CLOUDWATCH]
    # Run again: everything is kept, nothing is asked; --refresh asks again.
    asked = len(upstream.paths)
    assert pins_cmd(upstream, file) == 0
    assert len(upstream.paths) == asked and "source: kept" in capsys.readouterr().out
    upstream.commits[TARGET] = "d" * 40
    assert pins_cmd(upstream, file, "--refresh") == 0
    assert json.loads(file.read_text())[pins.PINS_KEY]["hub"]["revisions"][TARGET]["commit"] == (
        "d" * 40
    )


def test_a_new_cluster_version_resolves_the_addons_again(upstream: Upstream, tmp_path) -> None:
    file = tmp_path / "cdk.context.json"
    assert pins_cmd(upstream, file) == 0
    stale = json.loads(file.read_text())
    stale[pins.PINS_KEY]["eks_addons"]["kubernetes_version"] = "1.34"
    file.write_text(json.dumps(stale))
    assert pins_cmd(upstream, file) == 0  # the stubbed EKS answers for 1.35 only
    assert json.loads(file.read_text())[pins.PINS_KEY]["eks_addons"]["kubernetes_version"] == (
        "1.35"
    )


def test_without_an_api_digest_the_asset_is_downloaded_and_hashed(
    upstream: Upstream, tmp_path: Path, capsys
) -> None:
    upstream.digest = None
    file = tmp_path / "cdk.context.json"
    assert pins_cmd(upstream, file) == 0
    assert f"downloaded {upstream.base}{DOWNLOAD_PATH} and hashed it" in capsys.readouterr().out
    plugin = json.loads(file.read_text())[pins.PINS_KEY]["gateway_api_plugin"]
    assert (plugin["sha256"], plugin["method"]) == (ASSET_SHA256, "downloaded-and-hashed")


def test_a_download_that_differs_from_the_api_digest_writes_nothing(
    upstream: Upstream, tmp_path: Path, capsys
) -> None:
    upstream.asset = b"tampered"
    file = tmp_path / "cdk.context.json"
    assert pins_cmd(upstream, file, "--download") == 1
    err = capsys.readouterr().err
    assert "digest mismatch" in err and f"sha256:{ASSET_SHA256}" in err
    assert "nothing written" in err and not file.exists()


def test_a_missing_model_and_no_default_version_are_each_reported(
    upstream: Upstream, tmp_path: Path, capsys
) -> None:
    del upstream.commits[DRAFT]
    file = tmp_path / "cdk.context.json"
    file.write_text('{"keep": 1}')
    assert pins_cmd(upstream, file, defaults={S3_CSI: DEFAULTS[S3_CSI], CLOUDWATCH: None}) == 1
    err = capsys.readouterr().err
    assert f"GET {upstream.base}/api/models/{DRAFT}/revision/main: HTTP 404" in err
    assert "lists no default version of amazon-cloudwatch-observability for Kubernetes 1.35" in err
    assert file.read_text() == '{"keep": 1}'  # nothing written


def test_offline_it_names_what_it_could_not_reach_and_writes_nothing(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    # No AWS credentials anywhere (and no instance metadata to ask).
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    file = tmp_path / "cdk.context.json"
    argv = ["pins", "--context-file", str(file), "--github-api", closed, "--hub-api", closed]
    assert main(argv) == 1  # the real EKS client, without credentials
    err = capsys.readouterr().err
    assert f"hub: GET {closed}/api/models/{TARGET}/revision/main: <urlopen error" in err
    assert f"could not reach {closed}{RELEASE_PATH}" in err
    assert "EKS DescribeAddonVersions in us-east-2 (aws-mountpoint-s3-csi-driver" in err
    assert "set AWS credentials" in err
    assert not file.exists()


def test_check_confirms_the_recorded_pins_and_fails_on_each_that_moved(
    upstream: Upstream, tmp_path: Path, capsys
) -> None:
    file = tmp_path / "cdk.context.json"
    assert pins_cmd(upstream, file) == 0
    before = file.read_text()
    capsys.readouterr()
    assert pins_cmd(upstream, file, "--check") == 0
    out = capsys.readouterr().out
    assert f"ok: {TARGET}@{'a' * 40} exists" in out and "sha256 still matches" in out
    assert f"ok: {S3_CSI} v2.2.1-eksbuild.1 is the default for Kubernetes 1.35" in out
    # The hub forgot the commit, the asset was re-uploaded, the add-on version was withdrawn.
    del upstream.commits[TARGET]
    upstream.digest = "sha256:" + "e" * 64
    withdrawn = {S3_CSI: "v2.3.0-eksbuild.1", CLOUDWATCH: DEFAULTS[CLOUDWATCH]}
    assert pins_cmd(upstream, file, "--check", defaults=withdrawn) == 1
    out = capsys.readouterr().out
    assert (
        f"FAILED: hub: GET {upstream.base}/api/models/{TARGET}/revision/{'a' * 40}: HTTP 404" in out
    )
    assert f"FAILED: digest mismatch: {GATEWAY_API_PLUGIN_ASSET}" in out
    assert f"FAILED: {S3_CSI} v2.2.1-eksbuild.1 is no longer listed" in out
    assert file.read_text() == before  # --check writes nothing


def test_check_without_a_record_and_a_nonsense_record_are_refused(
    upstream: Upstream, tmp_path: Path, capsys
) -> None:
    file = tmp_path / "cdk.context.json"
    assert pins_cmd(upstream, file, "--check") == 1
    assert "records no deploy pins" in capsys.readouterr().err
    file.write_text(json.dumps({pins.PINS_KEY: {"hub": "main"}}))
    assert pins_cmd(upstream, file) == 2
    assert "experiment:pins.hub: Input should be" in capsys.readouterr().err
    assert json.loads(file.read_text()) == {pins.PINS_KEY: {"hub": "main"}}
    assert pins_cmd(upstream, file, "--refresh") == 0  # --refresh replaces it
    assert "eks_addons" in json.loads(file.read_text())[pins.PINS_KEY]
