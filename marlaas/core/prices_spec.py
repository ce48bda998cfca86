"""What devices cost per hour, for ``marlaas plan``."""

from __future__ import annotations

from pydantic import Field, field_validator

from marlaas.core import limits as L
from marlaas.core.spec_fields import Amount, StrictSpec, printable


class PricesSpec(StrictSpec):
    """What devices cost, for ``marlaas plan`` [currency units per device-hour]: a pool's own
    price, else its device kind's (the cost profile's name, e.g. ``h100-7b``), else the
    default."""

    device_hour: Amount(L.MAX_PRICE_PER_DEVICE_HOUR, positive=True) = 1.0
    """Default price of one device for one hour."""
    pools: dict[str, Amount(L.MAX_PRICE_PER_DEVICE_HOUR, positive=True)] = Field(
        default_factory=dict
    )
    """Price per device-hour by pool name."""
    profiles: dict[str, Amount(L.MAX_PRICE_PER_DEVICE_HOUR, positive=True)] = Field(
        default_factory=dict
    )
    """Price per device-hour by device kind: the name of the cost profile simulated."""
    currency: str = "USD"
    source: str = "assumption"
    """Where the numbers come from (a price list and its date, or ``assumption``)."""

    @field_validator("currency", "source")
    @classmethod
    def _text(cls, value: str) -> str:
        return printable(value, 1000)

    def device_hour_price(self, pool: str, profile: str | None = None) -> float:
        """The price of one device of ``pool`` for one hour, simulated with ``profile``."""
        if pool in self.pools:
            return self.pools[pool]
        return self.profiles.get(profile or "", self.device_hour)
