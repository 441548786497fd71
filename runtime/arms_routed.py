"""Wait until each compared arm's Service selects that arm's pods (standard library only).

The two compared arms are the two revisions of one Argo Rollout: stable = baseline, canary =
speculative. Argo points the canary (speculative) Service at the stable (baseline) pods
until a speculative pod is available, and again after an abort (argo-rollouts v1.9.0
rollout/service.go ``reconcileStableAndCanaryService`` and rollout/trafficrouting.go, the
aborted branch). Both Services then answer ``/health``, so a load test that only waits for
health could compare the baseline with itself. The load-test Job runs this first: it reads
the Rollout and the two Services from the Kubernetes API with the pod's projected
service-account token and returns once the baseline Service selects the stable revision
and the speculative Service the canary revision, bounded by ``--timeout-s``.

    python -m runtime.arms_routed --namespace qwen --rollout qwen-sd-arms-<hash> \\
        --baseline-service qwen-vllm --speculative-service qwen-sd-vllm --timeout-s 3600
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

# argo-rollouts v1.9.0 pkg/apis/rollouts/v1alpha1/types.go, DefaultRolloutUniqueLabelKey:
# the label Argo adds to a revision's pods and to the Services' selectors.
HASH_LABEL = "rollouts-pod-template-hash"
ROLLOUTS_PATH = "/apis/argoproj.io/v1alpha1/namespaces/{ns}/rollouts/{name}"
SERVICES_PATH = "/api/v1/namespaces/{ns}/services/{name}"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
POLL_S = 15.0


def not_routed(
    rollout: dict[str, Any], baseline_service: dict[str, Any], speculative_service: dict[str, Any]
) -> str | None:
    """Why the two Services do not yet reach their own arm, or None when they do."""
    status = rollout.get("status") or {}
    stable, current = status.get("stableRS"), status.get("currentPodHash")
    if status.get("abort"):
        return (
            "the Rollout is aborted (guardrail rollback): the speculative Service reaches the "
            "baseline; a member of the operators' group re-enables it with "
            "kubectl argo rollouts retry"
        )
    if not stable:
        return "the Rollout has no stable (baseline) revision yet"
    if not current or current == stable:
        return "the Rollout has no canary (speculative) revision yet"
    base = (baseline_service.get("spec") or {}).get("selector", {}).get(HASH_LABEL)
    spec = (speculative_service.get("spec") or {}).get("selector", {}).get(HASH_LABEL)
    if base != stable:
        return f"the baseline Service selects revision {base!r}, not the stable {stable!r}"
    if spec != current:
        return (
            f"the speculative Service selects revision {spec!r}, not the canary {current!r} "
            "(no speculative pod is available yet)"
        )
    return None


def api_reader(token_dir: str = TOKEN_DIR) -> Callable[[str], dict[str, Any]]:
    """GET a path of the cluster's API server with the pod's service-account token."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    context = ssl.create_default_context(cafile=os.path.join(token_dir, "ca.crt"))

    def read(path: str) -> dict[str, Any]:
        with open(os.path.join(token_dir, "token"), encoding="utf-8") as handle:
            token = handle.read().strip()  # re-read: the kubelet rotates projected tokens
        request = urllib.request.Request(
            f"https://{host}:{port}{path}", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return dict(json.load(response))

    return read


def wait(
    read: Callable[[str], dict[str, Any]],
    args: argparse.Namespace,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll until both arms are routed (True) or ``args.timeout_s`` passes (False)."""
    ns = args.namespace
    deadline = clock() + args.timeout_s
    while True:
        try:
            reason = not_routed(
                read(ROLLOUTS_PATH.format(ns=ns, name=args.rollout)),
                read(SERVICES_PATH.format(ns=ns, name=args.baseline_service)),
                read(SERVICES_PATH.format(ns=ns, name=args.speculative_service)),
            )
        except OSError as error:  # urllib's errors included; the API may be briefly away
            reason = f"cannot read the Rollout or its Services: {error}"
        if reason is None:
            print(f"both arms routed: {args.baseline_service} and {args.speculative_service}")
            return True
        left = deadline - clock()
        if left <= 0:
            print(f"not routed after {args.timeout_s:.0f} s: {reason}", file=sys.stderr)
            return False
        print(f"waiting ({left:.0f} s left): {reason}", flush=True)
        sleep(min(args.poll_s, left))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--rollout", required=True)
    parser.add_argument("--baseline-service", required=True)
    parser.add_argument("--speculative-service", required=True)
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--poll-s", type=float, default=POLL_S)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return 0 if wait(api_reader(), args) else 1


if __name__ == "__main__":
    sys.exit(main())
