"""Resolving each deploy pin upstream, and checking that a recorded one still exists there.

Each function returns the pin with its source, or raises ``Unreachable`` saying what it asked
and what came back (no network, HTTP status, no credentials, a missing default): the command
(experiment/pins/cli.py) collects every failure and writes nothing when there is one.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from experiment.pins.record import AddonPin, HubCommit, PluginPin
from runtime.model_import import Hub, HubImportError

GITHUB_API = "https://api.github.com"
TIMEOUT_S = 30.0
DOWNLOAD_TIMEOUT_S = 300.0
_CHUNK = 1 << 20


class Unreachable(Exception):
    """A pin could not be resolved or checked; the message says what was asked and why."""


# The GitHub calls use urllib directly, not loadtest/processes.py's http_get: experiment
# imports only runtime (CONTRIBUTING.md), and a pin that fails must say which status came
# back, which http_get drops; the calls send headers (Accept, a token) and the download
# streams. A named exception of tests/test_architecture.py's one-copy check. The hub is asked
# with runtime/model_import.py's client, the one the import Job uses.


def _request(url: str, headers: dict[str, str]) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"User-Agent": "trn-specdecode-pins", **headers})


def _open(request: urllib.request.Request, timeout: float) -> Any:
    url = request.full_url
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        hint = ""
        if err.code == 404:
            hint = " (no such repository, release or revision)"
        elif err.code in (401, 403, 429):
            hint = " (refused or rate-limited: set GITHUB_TOKEN for the GitHub API)"
        raise Unreachable(f"GET {url}: HTTP {err.code} {err.reason}{hint}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise Unreachable(f"could not reach {url}: {reason}") from None


def _json(url: str, headers: dict[str, str]) -> Any:
    with _open(_request(url, headers), TIMEOUT_S) as response:
        body = response.read()
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise Unreachable(f"GET {url}: the answer is not JSON") from None


def _bearer(variable: str) -> dict[str, str]:
    token = os.environ.get(variable)
    return {"Authorization": f"Bearer {token}"} if token else {}


# The hub's revision endpoint, as huggingface_hub's own client calls it
# (huggingface/huggingface_hub src/huggingface_hub/hf_api.py, HfApi.model_info:
# f"{endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}"), answers the model's
# info whose "sha" is the commit the revision points at (ModelInfo.sha).
def hub_revision_url(endpoint: str, model: str, revision: str) -> str:
    return f"{endpoint}/api/models/{model}/revision/{urllib.parse.quote(revision, safe='')}"


def hub_commit(endpoint: str, model: str, revision: str = "main") -> HubCommit:
    url = hub_revision_url(endpoint, model, revision)
    try:
        # HF_TOKEN: huggingface_hub's variable for a token (a gated or private model).
        sha = Hub(endpoint, token=os.environ.get("HF_TOKEN")).commit(model, revision)
    except HubImportError as err:
        raise Unreachable(f"hub: {err}") from None
    except ValueError:  # an answer that is not JSON
        raise Unreachable(f"GET {url}: the answer is not the hub's model info") from None
    try:
        return HubCommit(commit=sha, source=f"hub API: GET {url} -> sha")
    except ValueError:
        raise Unreachable(f"GET {url}: 'sha' {sha!r} is not a 40-hex commit") from None


def check_hub_commit(endpoint: str, model: str, commit: str) -> str:
    """What the hub says of a recorded commit; ``Unreachable`` when it is gone."""
    found = hub_commit(endpoint, model, commit)
    if found.commit != commit:
        raise Unreachable(f"{model}: the hub answers commit {found.commit} for {commit}")
    return f"{model}@{commit} exists ({found.source})"


# GitHub's REST API "Get a release by tag name" (GET /repos/{owner}/{repo}/releases/tags/{tag},
# docs.github.com/en/rest/releases/releases, API version 2022-11-28) lists the release's assets,
# each with "name", "browser_download_url" and, since June 2025, "digest": "sha256:<hex>"
# computed by GitHub at upload (github.blog changelog 2025-06-03 "Releases now expose digests
# for release assets"; github/roadmap#1136; google/go-github#3628 adds ReleaseAsset.Digest from
# that field). Older assets have "digest": null: the asset is then downloaded and hashed.
def release_url(api: str, repo: str, tag: str) -> str:
    return f"{api}/repos/{repo}/releases/tags/{urllib.parse.quote(tag, safe='')}"


def _download_sha256(url: str) -> str:
    digest = hashlib.sha256()
    # No token: the download redirects to another host (GitHub's asset storage).
    with _open(_request(url, {}), DOWNLOAD_TIMEOUT_S) as response:
        for chunk in iter(lambda: response.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def plugin_digest(api: str, repo: str, tag: str, asset: str, *, download: bool) -> PluginPin:
    """The asset's SHA-256 from the release API's digest; with ``download`` (or when the API
    has none) from the downloaded asset, which must then equal the API's digest if it has one."""
    url = release_url(api, repo, tag)
    release = _json(url, {"Accept": "application/vnd.github+json", **_bearer("GITHUB_TOKEN")})
    assets = release.get("assets") if isinstance(release, dict) else None
    if not isinstance(assets, list):
        raise Unreachable(f"GET {url}: the answer has no 'assets' (not a GitHub release)")
    found = next((a for a in assets if isinstance(a, dict) and a.get("name") == asset), None)
    if found is None:
        names = sorted(str(a.get("name")) for a in assets if isinstance(a, dict))
        raise Unreachable(f"GET {url}: release {tag} has no asset {asset!r} (it has {names})")
    listed = found.get("digest")
    api_hex = None
    if isinstance(listed, str) and listed.startswith("sha256:"):
        api_hex = listed.removeprefix("sha256:")
    elif listed is not None:
        raise Unreachable(f"GET {url}: asset {asset} has digest {listed!r}, not 'sha256:<hex>'")
    if api_hex is not None and not download:
        return PluginPin(
            version=tag,
            asset=asset,
            sha256=api_hex,
            method="release-api-digest",
            source=f"release API: GET {url} -> assets[{asset}].digest",
        )
    link = found.get("browser_download_url")
    if not isinstance(link, str):
        raise Unreachable(f"GET {url}: asset {asset} has no browser_download_url")
    hashed = _download_sha256(link)
    if api_hex is not None and hashed != api_hex:
        raise Unreachable(
            f"digest mismatch: {link} hashes to sha256:{hashed}, and the release API lists "
            f"{listed} for {asset}: the asset is not the one GitHub recorded; nothing pinned"
        )
    also = " (equal to the release API's digest)" if api_hex is not None else ""
    return PluginPin(
        version=tag,
        asset=asset,
        sha256=hashed,
        method="downloaded-and-hashed",
        source=f"downloaded {link} and hashed it{also}",
    )


def check_plugin_digest(api: str, recorded: PluginPin, repo: str, *, download: bool) -> str:
    current = plugin_digest(api, repo, recorded.version, recorded.asset, download=download)
    if current.sha256 != recorded.sha256:
        raise Unreachable(
            f"digest mismatch: {recorded.asset} {recorded.version} is now sha256:"
            f"{current.sha256} ({current.source}), and sha256:{recorded.sha256} is recorded"
        )
    return f"{recorded.asset} {recorded.version} sha256 still matches ({current.source})"


# EKS DescribeAddonVersions (boto/botocore botocore/data/eks/2017-11-01/service-2.json):
# request addonName, kubernetesVersion; response addons[] of {addonName, addonVersions[] of
# {addonVersion, compatibilities[] of {clusterVersion, platformVersions, defaultVersion}}},
# paginated by nextToken over "addons" (paginators-1.json).
def _addon_versions(client: Any, addon: str, kubernetes_version: str) -> Iterator[dict[str, Any]]:
    from botocore.exceptions import BotoCoreError, ClientError

    region = client.meta.region_name
    asked = f"EKS DescribeAddonVersions in {region} ({addon}, Kubernetes {kubernetes_version})"
    try:
        pages = client.get_paginator("describe_addon_versions").paginate(
            addonName=addon, kubernetesVersion=kubernetes_version
        )
        versions = [
            version
            for page in pages
            for info in page.get("addons", [])
            if info.get("addonName") == addon
            for version in info.get("addonVersions", [])
        ]
    except ClientError as err:
        error = err.response.get("Error", {})
        raise Unreachable(f"{asked}: {error.get('Code')}: {error.get('Message')}") from None
    except BotoCoreError as err:
        hint = ""
        if type(err).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            hint = " (set AWS credentials: AWS_PROFILE, `aws configure` or `aws sso login`)"
        raise Unreachable(f"could not reach {asked}: {err}{hint}") from None
    return iter(versions)


def _source(client: Any, addon: str, kubernetes_version: str) -> str:
    return (
        f"EKS DescribeAddonVersions in {client.meta.region_name}: {addon}, Kubernetes "
        f"{kubernetes_version}, the version whose compatibilities[].defaultVersion is true"
    )


def addon_default(client: Any, addon: str, kubernetes_version: str) -> AddonPin:
    listed = []
    for version in _addon_versions(client, addon, kubernetes_version):
        listed.append(version.get("addonVersion"))
        for compatibility in version.get("compatibilities", []):
            if compatibility.get("clusterVersion") == kubernetes_version and compatibility.get(
                "defaultVersion"
            ):
                try:
                    return AddonPin(
                        version=version["addonVersion"],
                        source=_source(client, addon, kubernetes_version),
                    )
                except (KeyError, ValueError):
                    raise Unreachable(
                        f"EKS lists a default {addon} version {version.get('addonVersion')!r} "
                        "that is not of the form vX.Y.Z-eksbuild.N"
                    ) from None
    raise Unreachable(
        f"EKS DescribeAddonVersions in {client.meta.region_name} lists no default version of "
        f"{addon} for Kubernetes {kubernetes_version} (versions listed: {listed or 'none'}); "
        f"pick one and set it with -c, or use a Kubernetes version the add-on supports"
    )


def check_addon(client: Any, addon: str, kubernetes_version: str, recorded: str) -> str:
    listed = {}
    for version in _addon_versions(client, addon, kubernetes_version):
        listed[version.get("addonVersion")] = any(
            c.get("clusterVersion") == kubernetes_version and c.get("defaultVersion")
            for c in version.get("compatibilities", [])
        )
    if recorded not in listed:
        raise Unreachable(
            f"{addon} {recorded} is no longer listed for Kubernetes {kubernetes_version} in "
            f"{client.meta.region_name} (listed: {sorted(v for v in listed if v)})"
        )
    default = "the default" if listed[recorded] else "listed, no longer the default"
    return f"{addon} {recorded} is {default} for Kubernetes {kubernetes_version}"
