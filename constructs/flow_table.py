"""The flow table of one environment: every row of ``network_flows.py``, ``access_flows.py`` and
``team_flows.py``, which ``review/flows.py`` proves against the synthesized templates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from constructs.access_flows import access_flows
from constructs.flows import AccessFlow, EgressFlow, KubeFlow, NetworkFlow
from constructs.network_flows import denied_flows, egress_flows, gcs_store_flows, network_flows
from constructs.team_flows import kube_flows

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig


@dataclass(frozen=True)
class FlowTable:
    network: list[NetworkFlow] = field(default_factory=list)
    egress: list[EgressFlow] = field(default_factory=list)
    access: list[AccessFlow] = field(default_factory=list)
    kube: list[KubeFlow] = field(default_factory=list)
    # Network flows that the security groups must refuse.
    denied: list[NetworkFlow] = field(default_factory=list)


def flow_table(config: EnvironmentConfig) -> FlowTable:
    return FlowTable(
        network_flows() + gcs_store_flows(config),
        egress_flows(config),
        access_flows(config),
        kube_flows(config),
        denied_flows(config),
    )
