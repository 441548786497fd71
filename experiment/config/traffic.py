"""``loadtest.traffic``: a recorded trace the load test replays instead of the prompt suite."""

from __future__ import annotations

from itertools import pairwise
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, Field

from experiment.config.base import Section


def _strictly_increasing(edges: list[int]) -> list[int]:
    if any(b <= a for a, b in pairwise(edges)):
        raise ValueError(f"{edges} must be strictly increasing, such as {sorted(set(edges))}")
    return edges


# Input-length bucket edges in tokens ([512, 2048]: 0-511, 512-2047 and 2048+), checked once
# for every field that holds them (loadtest.traffic.length_buckets, local.traffic_length_buckets).
BucketEdges = Annotated[list[Annotated[int, Field(ge=1)]], AfterValidator(_strictly_increasing)]


class TrafficConfig(Section):
    """Replay of a traffic file (``python -m loadtest traffic import``, loadtest/traffic.py)
    instead of the prompt suite: each request with its own messages and output length, at its
    recorded arrival offset, the same schedule to both arms."""

    file: str | None = Field(
        default=None,
        description=(
            "Traffic file written by `python -m loadtest traffic import` to replay instead of "
            "loadtest.prompts (relative to the repository root or absolute); null: the "
            "prompt suite."
        ),
    )
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        default=1.0,
        description=(
            "Recorded arrival offsets are multiplied by this: 0.5 replays the trace twice "
            "as fast, 2 half as fast; above 0."
        ),
    )
    burst_writes: bool = Field(
        default=True,
        description=(
            "Requests the trace sends at one offset (a burst) are written together, on "
            "connections opened ahead, by the first of their senders to wake; false: each by "
            "its own sender in turn, the last of a large burst leaving milliseconds late "
            "(docs/records/replay-peers)."
        ),
    )
    length_buckets: BucketEdges = Field(
        default_factory=lambda: [512, 2048, 8192],
        description=(
            "Input-length bucket edges in tokens, strictly increasing: [512, 2048] makes the "
            "buckets 0-511, 512-2047 and 2048+; the report decides per class and bucket, "
            "bucketing each request's recorded input tokens when it is built (`python -m "
            "loadtest report RUN_DIR -c` with new edges: no re-import, no rerun)."
        ),
    )

    bucket_prefix: Annotated[
        str, Field(pattern=r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$")
    ] = Field(
        default="loadtest-traffic",
        description=(
            "On the cluster: the key prefix in the model-store bucket (model_store.bucket_"
            "name, KMS-encrypted) the load-test Job copies the traffic file from: "
            "<bucket_prefix>/<file name of loadtest.traffic.file>; its role may read that "
            "one object only. No leading or trailing slash."
        ),
    )

    def bucket_key(self) -> str | None:
        """The S3 key the cluster's load-test Job reads the traffic file from (None: no
        traffic file): the file's name under ``bucket_prefix`` (docs/traffic.md)."""
        if self.file is None:
            return None
        return f"{self.bucket_prefix}/{PurePosixPath(self.file).name}"
