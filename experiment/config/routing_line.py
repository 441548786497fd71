"""The ``-c`` line that enacts a verdict: which classes go to the speculative arm and the
acceptance floor each of them is held to (printed by the report, loadtest/render/decision.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from experiment.config.routing import RoutingConfig, _class_names


def routing_override_line(
    routing: RoutingConfig,
    speculative_classes: Iterable[str],
    acceptance_floors: Mapping[str, float] | None = None,
) -> str:
    """The ``-c`` overrides (experiment/loading.py syntax) that send exactly
    ``speculative_classes`` to the speculative arm, such as
    ``-c experiment.routing.speculative_classes=structured``; a class not yet allowed is
    added to ``routing.allowed_classes`` too, so the line is valid on its own.
    ``acceptance_floors`` (routed class -> floor) adds one
    ``-c experiment.routing.acceptance_floors.<class>=<floor>`` each: a dotted key merges
    into the mapping, so the classes it does not name keep their floors."""
    chosen = list(dict.fromkeys(speculative_classes))
    _class_names(chosen)
    floors = dict(acceptance_floors or {})
    unrouted = sorted(set(floors) - set(chosen))
    if unrouted:
        raise ValueError(
            f"acceptance floors for {unrouted}, which the line does not route to the "
            f"speculative arm ({chosen}): a floor guards a routed class"
        )
    outside = {name: value for name, value in floors.items() if not 0 < value <= 1}
    if outside:
        raise ValueError(f"acceptance floors {outside} are not above 0 and at most 1")
    parts = []
    missing = [name for name in chosen if name not in routing.allowed_classes]
    if missing:
        allowed = ",".join([*routing.allowed_classes, *missing])
        parts.append(f"-c experiment.routing.allowed_classes={allowed}")
    # An empty list is written as JSON: `key=` alone would parse as null.
    parts.append(f"-c experiment.routing.speculative_classes={','.join(chosen) or '[]'}")
    # repr: the shortest text that reads back as the same float.
    parts += [
        f"-c experiment.routing.acceptance_floors.{name}={floors[name]!r}"
        for name in chosen
        if name in floors
    ]
    return " ".join(parts)
