"""The `network:` section: the VPC, its subnets and the HyperPod subnets."""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, field_validator, model_validator

from config import catalog
from config.base import Frozen
from config.fields import AzId, cidr_block, log_retention_days

# A complete Secrets Manager ARN (the 6-character suffix Secrets Manager appends) of a secret that
# ECR's pull-through cache accepts: its name must start with ecr-pullthroughcache/.
PULL_THROUGH_SECRET_ARN_RE = re.compile(
    r"^arn:aws(-cn|-us-gov)?:secretsmanager:(?P<region>[a-z]{2}(-[a-z]+)+-\d):(?P<account>\d{12}):secret:"
    r"ecr-pullthroughcache/[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$"
)


class AvailabilityZone(Frozen):
    """An AZ by name and by ID. Names map to IDs differently in each account; IDs do not."""

    name: str = Field(description="AZ name in this account, e.g. us-east-1a; VPC subnets are placed by name.")
    id: AzId = Field(description="AZ ID, e.g. use1-az4; the same zone in every account.")


class HyperPodSubnet(Frozen):
    """One HyperPod subnet, pinned by AZ ID, inside a HyperPod secondary CIDR block."""

    az_id: AzId = Field(description="AZ ID of the subnet, e.g. use1-az4.")
    cidr: str = Field(description="IPv4 CIDR block inside one of network.hyperpod_cidr_blocks.")

    _check_cidr = field_validator("cidr")(classmethod(lambda cls, v: cidr_block(v)))


class Network(Frozen):
    """The VPC: subnets per AZ, HyperPod subnets in secondary CIDR blocks, endpoints, flow logs."""

    vpc_cidr: str = Field(description="Primary IPv4 CIDR block of the VPC, e.g. 10.10.0.0/16 (no host bits set).")
    public_subnet_mask: int = Field(
        default=24,
        ge=16,
        le=28,
        description="Prefix length of each public subnet; they hold only NAT gateways and load balancers.",
    )
    private_subnet_mask: int = Field(
        default=20,
        ge=16,
        le=28,
        description="Prefix length of each private subnet; EKS pods take VPC IPs (vpc-cni), so /20 gives 4091 per AZ.",
    )
    availability_zones: list[AvailabilityZone] = Field(
        min_length=2, description="AZs of the VPC, each by name and ID; the IDs must be distinct."
    )
    nat_gateways: int | None = Field(
        default=None, ge=0, description="NAT gateways; null: one outside production, one per AZ in production."
    )
    hyperpod_cidr_blocks: list[str] = Field(
        min_length=1,
        max_length=4,
        description="Secondary CIDR blocks for the HyperPod subnets; none may overlap vpc_cidr or each other.",
    )
    hyperpod_subnets: list[HyperPodSubnet] = Field(
        min_length=1,
        description="One HyperPod subnet per AZ ID, each in one of availability_zones and routed through the NAT gateway of its AZ.",
    )
    # Named for what it does: it does not close egress. The NAT gateways stay, because the
    # kubectl handler fetches Helm charts from their public repositories and nodes pull public
    # images (KubeRay from quay.io, the NVIDIA device plugin from nvcr.io); constructs/flows.py
    # lists those internet flows.
    aws_interface_endpoints: bool = Field(
        default=False,
        description="Interface endpoints for every AWS API the nodes and pods call, so those calls stay inside the VPC. Egress to the internet stays open through NAT: Helm charts and public images are fetched from the internet.",
    )
    images_from_ecr: bool = Field(
        default=False,
        description="Pull every image from ECR in the environment's account and region: ECR pull-through cache rules (quay.io, Docker Hub) for the operator and the LLM image (constructs/image_cache.py), and the NVIDIA device plugin (nvcr.io, which ECR cannot cache) as a CDK image asset that `cdk deploy` publishes (constructs/device_plugin_image.py).",
    )
    docker_hub_credential_secret_arn: str | None = Field(
        default=None,
        description='Complete ARN (with its 6-character suffix) of the Secrets Manager secret the Docker Hub pull-through cache rule signs in with: its name starts with ecr-pullthroughcache/ (ECR requires the prefix), its value is {"username": ..., "accessToken": ...}, in the environment\'s account and region. The operator creates it (docs/security.md); `hpray preflight` checks it. Required with images_from_ecr when the LLM service is on (rayproject/ray-llm is on Docker Hub).',
    )
    flow_log_retention_days: int = Field(
        default=90,
        description="Retention of the VPC flow-log group; a CloudWatch Logs retention period.",
        json_schema_extra={"enum": list(catalog.LOG_RETENTION_DAYS)},
    )

    _check_vpc = field_validator("vpc_cidr")(classmethod(lambda cls, v: cidr_block(v)))

    @field_validator("docker_hub_credential_secret_arn")
    @classmethod
    def _credential_arn(cls, v: str | None) -> str | None:
        if v is not None and not PULL_THROUGH_SECRET_ARN_RE.match(v):
            raise ValueError(
                f"{v!r} is not the complete ARN of a Secrets Manager secret whose name starts with "
                "ecr-pullthroughcache/; expected arn:aws:secretsmanager:REGION:ACCOUNT:secret:"
                "ecr-pullthroughcache/NAME-XXXXXX (the ARN `aws secretsmanager describe-secret` prints)"
            )
        return v

    @field_validator("hyperpod_cidr_blocks")
    @classmethod
    def _blocks(cls, v: list[str]) -> list[str]:
        return [cidr_block(c) for c in v]

    _retention = field_validator("flow_log_retention_days")(classmethod(lambda cls, v: log_retention_days(v)))

    @model_validator(mode="after")
    def _layout(self) -> Network:
        errors: list[str] = []
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        blocks = [ipaddress.IPv4Network(b) for b in self.hyperpod_cidr_blocks]
        named = [("network.vpc_cidr", vpc)] + [(f"network.hyperpod_cidr_blocks[{i}]", b) for i, b in enumerate(blocks)]
        for i, (na, a) in enumerate(named):
            for nb, b in named[i + 1 :]:
                if a.overlaps(b):
                    errors.append(f"{na} {a} overlaps {nb} {b}; CIDR blocks of one VPC must not overlap")
        if self.public_subnet_mask < vpc.prefixlen or self.private_subnet_mask < vpc.prefixlen:
            errors.append(
                f"network subnet masks (/{self.public_subnet_mask}, /{self.private_subnet_mask}) "
                f"must be at least the VPC prefix /{vpc.prefixlen}"
            )
        else:
            needed = len(self.availability_zones) * (
                2 ** (32 - self.public_subnet_mask) + 2 ** (32 - self.private_subnet_mask)
            )
            if needed > vpc.num_addresses:
                errors.append(
                    f"network.vpc_cidr {vpc} has {vpc.num_addresses} addresses but "
                    f"{len(self.availability_zones)} AZs of /{self.public_subnet_mask} public and "
                    f"/{self.private_subnet_mask} private subnets need {needed}"
                )
        az_ids = [z.id for z in self.availability_zones]
        if len(set(az_ids)) != len(az_ids):
            errors.append(f"network.availability_zones has a repeated AZ ID: {az_ids}")
        seen: list[tuple[str, ipaddress.IPv4Network]] = []
        for i, s in enumerate(self.hyperpod_subnets):
            net = ipaddress.IPv4Network(s.cidr)
            field = f"network.hyperpod_subnets[{i}].cidr"
            if not any(net.subnet_of(b) for b in blocks):
                errors.append(
                    f"{field} {net} is not inside any of network.hyperpod_cidr_blocks "
                    f"({', '.join(self.hyperpod_cidr_blocks)})"
                )
            for other_field, other in seen:
                if net.overlaps(other):
                    errors.append(f"{field} {net} overlaps {other_field} {other}")
            seen.append((field, net))
        for i, s in enumerate(self.hyperpod_subnets):
            if s.az_id not in az_ids:
                errors.append(
                    f"network.hyperpod_subnets[{i}].az_id: {s.az_id!r} is not one of the VPC's AZs "
                    f"(network.availability_zones: {', '.join(az_ids)}); a HyperPod subnet routes "
                    "through the NAT gateway of its own AZ, so its AZ must be one of them"
                )
        hp_ids = [s.az_id for s in self.hyperpod_subnets]
        if len(set(hp_ids)) != len(hp_ids):
            errors.append(f"network.hyperpod_subnets must have one subnet per AZ ID; got {hp_ids}")
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def nat_gateway_count(self, *, production: bool) -> int:
        if self.nat_gateways is not None:
            return self.nat_gateways
        return len(self.availability_zones) if production else 1
