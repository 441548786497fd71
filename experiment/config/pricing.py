"""``pricing``: hourly prices for the cost per 1M output tokens."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Section
from experiment.config.cluster import CapacityType


class InstancePrice(Section):
    """One hourly price and where it came from: reports print the source and date next to
    every cost figure, and label it "nominal" when it is a placeholder rather than a quote."""

    usd_per_hour: Annotated[float, Field(gt=0)] = Field(description="Hourly price, USD; above 0.")
    source: str = Field(
        min_length=1, description="Where the price comes from (printed next to every cost figure)."
    )
    as_of: date = Field(description="Date of the price (YYYY-MM-DD).")
    nominal: bool = Field(
        default=False,
        description="Set by the config: whether the price is a placeholder, not a quote.",
    )


NOMINAL_NEURON_USD_PER_HOUR = 40.0
NOMINAL_NEURON_SOURCE = (
    "nominal placeholder, not a quote: set pricing.neuron.<capacity type> to your price "
    "(EC2 On-Demand pricing page, your Capacity Block offer or reservation)"
)


def _nominal_neuron_price() -> InstancePrice:
    return InstancePrice(
        usd_per_hour=NOMINAL_NEURON_USD_PER_HOUR,
        source=NOMINAL_NEURON_SOURCE,
        as_of=date(2026, 11, 23),
        nominal=True,
    )


class LocalPrice(InstancePrice):
    """The CPU machine a user runs ``make local`` on; each local arm holds all of it."""

    instance_type: str = Field(
        default="m7i.large", description="The cloud instance type the local machine is priced as."
    )
    usd_per_hour: Annotated[float, Field(gt=0)] = Field(
        default=0.1008, description="Hourly price of that instance, USD; above 0."
    )
    source: str = Field(
        default="EC2 On-Demand Linux price of m7i.large in us-east-1 (nominal: your laptop "
        "costs nothing per hour, this prices the equivalent cloud CPU)",
        min_length=1,
        description="Where the local price comes from.",
    )
    as_of: date = Field(default=date(2026, 11, 23), description="Date of the local price.")
    nominal: bool = Field(
        default=True, description="Whether the local price is labelled nominal in reports."
    )


class PricingConfig(Section):
    """Prices for cost per 1M output tokens. No lookup at run time: set your own.

    An arm pays for its share of the instance: devices it claims / devices of the instance.
    """

    currency: Literal["USD"] = Field(default="USD", description="Currency of every price: USD.")
    neuron: dict[CapacityType, InstancePrice] = Field(
        default_factory=lambda: {capacity: _nominal_neuron_price() for capacity in CapacityType},
        description=(
            "Price of the Neuron instance per capacity type (on-demand, "
            "capacity-block, reservation); a price you set needs its source and as_of."
        ),
    )
    local: LocalPrice = Field(
        default_factory=LocalPrice, description="Price of the machine the local run uses."
    )

    @field_validator("neuron", mode="before")
    @classmethod
    def _unset_capacity_types_stay_nominal(cls, value: object) -> object:
        # Pricing one capacity type (with its usd_per_hour, source, as_of) keeps the others.
        if isinstance(value, dict):
            # StrEnum members hash and compare like their values, so str keys match too.
            defaults = {c.value: _nominal_neuron_price() for c in CapacityType if c not in value}
            return {**defaults, **value}
        return value

    @model_validator(mode="after")
    def _a_set_price_says_where_it_came_from(self) -> PricingConfig:
        # A neuron price is nominal exactly while it keeps the placeholder source, so a price
        # of your own is never labelled a placeholder, nor a placeholder passed off as a quote.
        prices = {}
        for capacity, price in self.neuron.items():
            placeholder = price.source == NOMINAL_NEURON_SOURCE
            if placeholder and price.usd_per_hour != NOMINAL_NEURON_USD_PER_HOUR:
                raise ValueError(
                    f"pricing.neuron.{capacity.value}.usd_per_hour is set but "
                    f"pricing.neuron.{capacity.value}.source is still the placeholder: set "
                    "source (where the price comes from) and as_of (its date) too"
                )
            prices[capacity] = price.model_copy(update={"nominal": placeholder})
        object.__setattr__(self, "neuron", prices)
        return self
