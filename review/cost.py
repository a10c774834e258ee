"""Estimated monthly cost of an environment, read from its templates and priced with the table
in ``config/prices.yaml`` (``config.prices``; kept in the repo with its sources and the date it was
recorded).

Only provisioned capacity is estimated (HyperPod instances and their EBS, FSx, NAT gateways, EKS
control plane and node groups, interface endpoints, KMS keys). Usage-based charges (S3 storage,
data processing and transfer, log ingestion) are listed as not estimated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from config import versions
from config.prices import PriceTable, load_prices
from review.analysis import as_list, show
from review.assembly import Stack

NOT_ESTIMATED = "S3 storage and requests, NAT/endpoint data processing, data transfer, CloudWatch Logs ingestion"


@dataclass(frozen=True)
class LineItem:
    stack: str
    resource: str
    item: str
    quantity: str
    unit_price: str
    monthly: float | None  # None: no price in the table
    section: str


@dataclass
class CostEstimate:
    items: list[LineItem] = field(default_factory=list)

    @property
    def total(self) -> float:
        return round(sum(i.monthly for i in self.items if i.monthly is not None), 2)

    @property
    def unpriced(self) -> list[LineItem]:
        return [i for i in self.items if i.monthly is None]

    def by_item(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i in self.items:
            if i.monthly is not None:
                out[i.item] = round(out.get(i.item, 0.0) + i.monthly, 2)
        return out


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def control_plane_section(version: str, on: date) -> tuple[str, str]:
    """(price table section, support status) of an EKS control plane at ``version`` on ``on``."""
    status = versions.eks_support_status(version, on) or "unknown"
    return (
        "eks_cluster_extended_hourly" if status in (versions.EXTENDED, versions.END_OF_LIFE) else "eks_cluster_hourly"
    ), status


def estimate(stacks: list[Stack], prices: PriceTable | None = None, *, on: date | None = None) -> CostEstimate:
    """Monthly cost of ``stacks``; the EKS control plane is priced at the standard rate, plus an
    extended-support surcharge line where its Kubernetes version is past standard support on
    ``on`` (default: config/versions.py SUPPORT_STATUS_AS_OF, so a report is the same for the
    same inputs)."""
    prices = prices or load_prices()
    on = on or versions.SUPPORT_STATUS_AS_OF
    h = prices.hours
    est = CostEstimate()

    def add(
        stack: Stack,
        lid: str,
        item: str,
        qty: str,
        unit: float | None,
        unit_text: str,
        monthly: float | None,
        section: str,
    ) -> None:
        est.items.append(
            LineItem(
                stack.display_name,
                lid,
                item,
                qty,
                unit_text if unit is not None else "no price in table",
                None if monthly is None else round(monthly, 2),
                section,
            )
        )

    for stack in stacks:
        resources = {r.logical_id: r for r in stack.resources()}
        for r in resources.values():
            p = r.properties
            if r.type == "AWS::SageMaker::Cluster":
                for g in as_list(p.get("InstanceGroups")):
                    itype, count = show(g.get("InstanceType")), _int(g.get("InstanceCount")) or 0
                    name = show(g.get("InstanceGroupName"))
                    unit = prices.price("hyperpod_instance_hourly", itype)
                    add(
                        stack,
                        r.logical_id,
                        f"HyperPod {itype}",
                        f"{count} × {name}",
                        unit,
                        f"${unit}/h",
                        None if unit is None else count * unit * h,
                        "hyperpod_instance_hourly",
                    )
                    gib = sum(
                        _int((c.get("EbsVolumeConfig") or {}).get("VolumeSizeInGB")) or 0
                        for c in as_list(g.get("InstanceStorageConfigs"))
                    )
                    if gib and count:
                        unit = prices.price("hyperpod_ebs_gb_month")
                        add(
                            stack,
                            r.logical_id,
                            "HyperPod EBS",
                            f"{count} × {gib} GiB ({name})",
                            unit,
                            f"${unit}/GB-mo",
                            count * gib * unit,
                            "hyperpod_ebs_gb_month",
                        )
            elif r.type == "AWS::FSx::FileSystem" and p.get("FileSystemType") == "LUSTRE":
                lc = p.get("LustreConfiguration") or {}
                dtype, tput, gib = (
                    lc.get("DeploymentType", "SCRATCH_1"),
                    lc.get("PerUnitStorageThroughput"),
                    _int(p.get("StorageCapacity")) or 0,
                )
                unit = prices.price("fsx_lustre_gb_month", dtype, tput)
                add(
                    stack,
                    r.logical_id,
                    "FSx for Lustre",
                    f"{gib} GiB {dtype} {tput} MB/s/TiB",
                    unit,
                    f"${unit}/GB-mo",
                    None if unit is None else gib * unit,
                    "fsx_lustre_gb_month",
                )
            elif r.type == "AWS::EC2::NatGateway":
                unit = prices.price("nat_gateway_hourly")
                add(stack, r.logical_id, "NAT gateway", "1", unit, f"${unit}/h", unit * h, "nat_gateway_hourly")
            elif r.type == "AWS::EKS::Cluster":
                version = show(p.get("Version"))
                section, status = control_plane_section(version, on)
                unit = prices.price("eks_cluster_hourly")
                add(
                    stack,
                    r.logical_id,
                    "EKS control plane",
                    f"Kubernetes {version}, {status} support on {on.isoformat()}",
                    unit,
                    f"${unit}/h",
                    None if unit is None else unit * h,
                    "eks_cluster_hourly",
                )
                if section == "eks_cluster_extended_hourly":
                    extended = prices.price(section)
                    surcharge = None if extended is None or unit is None else round(extended - unit, 4)
                    _, end_standard, end_extended = versions.EKS_CALENDAR[version]
                    add(
                        stack,
                        r.logical_id,
                        "EKS extended support",
                        f"Kubernetes {version}, past standard support since {end_standard.isoformat()} "
                        f"(extended until {end_extended.isoformat()})",
                        surcharge,
                        f"+${surcharge}/h",
                        None if surcharge is None else surcharge * h,
                        section,
                    )
            elif r.type == "AWS::EKS::Nodegroup":
                count = _int((p.get("ScalingConfig") or {}).get("DesiredSize")) or 0
                types = [show(t) for t in as_list(p.get("InstanceTypes"))]
                lt = None
                for target, _ in _refs(p.get("LaunchTemplate")):
                    lt = resources.get(target)
                if not types and lt is not None:
                    t = (lt.properties.get("LaunchTemplateData") or {}).get("InstanceType")
                    types = [show(t)] if t else []
                itype = types[0] if types else "t3.medium"  # EKS's default node instance type
                unit = prices.price("ec2_instance_hourly", itype)
                add(
                    stack,
                    r.logical_id,
                    f"EKS nodes {itype}",
                    f"{count} (desired)",
                    unit,
                    f"${unit}/h",
                    None if unit is None else count * unit * h,
                    "ec2_instance_hourly",
                )
                disk = _int(p.get("DiskSize"))
                volume_type = "gp3"
                if disk is None and lt is not None:
                    devs = [
                        m.get("Ebs") or {}
                        for m in as_list((lt.properties.get("LaunchTemplateData") or {}).get("BlockDeviceMappings"))
                    ]
                    disk = sum(_int(d.get("VolumeSize")) or 0 for d in devs) or None
                    volume_type = next((d.get("VolumeType") for d in devs if d.get("VolumeType")), "gp3")
                disk = disk if disk is not None else 20  # EKS's default node disk, GiB
                unit = prices.price("ebs_gb_month", volume_type)
                add(
                    stack,
                    r.logical_id,
                    "EKS node EBS",
                    f"{count} × {disk} GiB {volume_type}",
                    unit,
                    f"${unit}/GB-mo",
                    None if unit is None else count * disk * unit,
                    "ebs_gb_month",
                )
            elif r.type == "AWS::EC2::VPCEndpoint" and p.get("VpcEndpointType") == "Interface":
                azs = len(as_list(p.get("SubnetIds"))) or 1
                unit = prices.price("vpc_interface_endpoint_hourly_per_az")
                add(
                    stack,
                    r.logical_id,
                    "Interface endpoint",
                    f"{azs} AZ",
                    unit,
                    f"${unit}/h per AZ",
                    azs * unit * h,
                    "vpc_interface_endpoint_hourly_per_az",
                )
            elif r.type == "AWS::KMS::Key":
                unit = prices.price("kms_key_month")
                add(stack, r.logical_id, "KMS key", "1", unit, f"${unit}/mo", unit, "kms_key_month")
    return est


def _refs(value: Any):
    from review.analysis import references

    return references(value)
