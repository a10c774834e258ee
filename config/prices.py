"""The price table (``prices.yaml`` beside this module: on-demand list prices, each with its source
page and the date it was recorded) and the lookups the config, the CDK app and the CLI make of it.

A fact, like the instance catalog: the config's production check and the cluster's synth warning
name what EKS extended support costs, ``hpray preflight`` prints it, and the review's cost
estimate (review/cost.py) prices every resource with the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PRICES_FILE = Path(__file__).resolve().parent / "prices.yaml"


@dataclass(frozen=True)
class PriceTable:
    data: dict[str, Any]
    path: str

    @property
    def hours(self) -> float:
        return float(self.data["hours_per_month"])

    def price(self, section: str, *keys: Any) -> float | None:
        node = self.data[section]
        if not keys:
            return float(node["price"])
        cur: Any = node["prices"]
        for k in keys:
            if not isinstance(cur, dict):
                return None
            # YAML keys may be ints (throughput tiers) or strings
            cur = cur.get(k, cur.get(str(k), cur.get(int(k)) if str(k).isdigit() else None))
            if cur is None:
                return None
        return float(cur)

    def source(self, section: str) -> str:
        return str(self.data[section]["source"])

    def verified(self, section: str) -> bool:
        """False where the table says its figures could not be confirmed against the source."""
        return self.data[section].get("verified", True) is not False


def load_prices(path: str | Path = PRICES_FILE) -> PriceTable:
    data = yaml.safe_load(Path(path).read_text())
    return PriceTable(data, str(path))


def extended_support_monthly_extra(prices: PriceTable | None = None) -> float | None:
    """What EKS extended support adds to one control plane per month (extended minus standard
    per-cluster-hour price, times the table's hours); None where the table lacks either price."""
    try:
        prices = prices or load_prices()
        extended, standard = prices.price("eks_cluster_extended_hourly"), prices.price("eks_cluster_hourly")
    except (OSError, KeyError, ValueError):
        return None
    return None if extended is None or standard is None else round((extended - standard) * prices.hours, 2)


def extended_support_cost_text(prices: PriceTable | None = None) -> str:
    """The monthly extended-support surcharge of one cluster in words, with how it is computed."""
    prices = prices or load_prices()
    extra = extended_support_monthly_extra(prices)
    if extra is None:
        return "a higher per-cluster-hour price (no price in config/prices.yaml)"
    extended, standard = prices.price("eks_cluster_extended_hourly"), prices.price("eks_cluster_hourly")
    return (
        f"${extra:,.2f} a month more than standard support ({prices.hours:g} h x "
        f"${extended:.2f} instead of ${standard:.2f} per cluster-hour, config/prices.yaml)"
    )
