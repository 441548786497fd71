"""RFC 7386 JSON merge patch, as the API server applies ``kubectl patch --type merge``: the
tests of the Rollout's canary patch and of its admission policy build objects with it."""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` merged in; neither is modified. ``None`` removes a key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
