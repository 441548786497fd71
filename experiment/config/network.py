"""``network``: the VPC."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, field_validator

from experiment.config.base import Section

# The retention periods CloudWatch Logs accepts.
_UP_TO_18_MONTHS = (30, 60, 90, 120, 150, 180, 365, 400, 545)
_TWO_TO_TEN_YEARS = (731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, *_UP_TO_18_MONTHS, *_TWO_TO_TEN_YEARS)


class NetworkConfig(Section):
    vpc_cidr: str = Field(
        default="10.42.0.0/16", description="IPv4 CIDR of the VPC; a prefix between /16 and /20."
    )
    availability_zones: list[str] = Field(
        default_factory=lambda: ["us-east-2a", "us-east-2b", "us-east-2c"],
        description=(
            "AZs of the region that hold your trn2 capacity (check your Capacity "
            "Block or ODCR); at least 2, all in `region`, no duplicates."
        ),
    )
    nat_gateways: Annotated[int, Field(ge=1)] = Field(
        default=1, description="NAT gateways for the private subnets' egress; 1 or more."
    )
    flow_logs_retention_days: int = Field(
        default=30,
        description=(
            "Days CloudWatch Logs keeps the VPC flow logs; one of the retentions "
            "CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, ..., 3653)."
        ),
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as err:
            raise ValueError(
                f"network.vpc_cidr {value!r} is not an IPv4 network such as '10.42.0.0/16' ({err})"
            ) from None
        if not 16 <= network.prefixlen <= 20:
            raise ValueError(
                f"network.vpc_cidr {value!r}: use a prefix between /16 and /20 so every AZ gets "
                "public and private subnets"
            )
        return value

    @field_validator("availability_zones")
    @classmethod
    def _azs(cls, value: list[str]) -> list[str]:
        if len(value) < 2:
            raise ValueError(
                "network.availability_zones must list at least 2 AZs (EKS needs subnets in two); "
                "name the AZs that hold your trn2 capacity, e.g. ['us-east-2a', 'us-east-2b']"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"network.availability_zones has duplicates: {value}")
        return value

    @field_validator("flow_logs_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"network.flow_logs_retention_days {value} is not a CloudWatch Logs retention; "
                f"use one of {list(LOG_RETENTION_DAYS)}"
            )
        return value
