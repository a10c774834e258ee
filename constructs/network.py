"""The platform network: VPC, HyperPod subnets pinned by AZ ID, the shared security group,
VPC endpoints and flow logs."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from config.network import Network
from constructs.compliance import acknowledge
from constructs.flows import LUSTRE_PORTS as FLOW_LUSTRE_PORTS

# Interface endpoints of network.aws_interface_endpoints: node bootstrap (ec2, sts, eks-auth), image pulls
# (ecr.api, ecr.dkr; layers come through the S3 gateway endpoint), logs and metrics, Session
# Manager (ssm, ssmmessages, ec2messages), the HyperPod control plane (sagemaker.api) and the
# secrets the Secrets Store CSI driver's AWS provider fetches for pods (secretsmanager).
INTERFACE_ENDPOINTS: tuple[str, ...] = (
    "ec2",
    "ecr.api",
    "ecr.dkr",
    "sts",
    "logs",
    "monitoring",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "eks",
    "eks-auth",
    "sagemaker.api",
    "secretsmanager",
)


def lustre_ports() -> list[ec2.Port]:
    """Lustre: 988 for LNet, 1018-1023 for the client's reserved ports (constructs/flows.py).
    Built when used, not at import: a module of the platform makes no kernel call at import (app.py)."""
    return [ec2.Port.tcp(lo) if lo == hi else ec2.Port.tcp_range(lo, hi) for lo, hi in FLOW_LUSTRE_PORTS]


class PlatformNetwork(Construct):
    """VPC with public and private subnets over the configured AZs plus HyperPod subnets."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        network_config: Network,
        production: bool,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = network_config

        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(network_config.vpc_cidr),
            availability_zones=[z.name for z in network_config.availability_zones],
            nat_gateways=network_config.nat_gateway_count(production=production),
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=network_config.public_subnet_mask
                ),
                ec2.SubnetConfiguration(
                    name="Private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=network_config.private_subnet_mask,
                ),
            ],
            restrict_default_security_group=False,
        )
        # Public subnets hold only NAT gateways: nothing should get a public IP by default.
        az_id_by_name = {z.name: z.id for z in network_config.availability_zones}
        for subnet in [*self.vpc.public_subnets, *self.vpc.private_subnets]:
            _pin_to_az_id(subnet, az_id_by_name[subnet.availability_zone])
        for subnet in self.vpc.public_subnets:
            subnet.node.default_child.map_public_ip_on_launch = False  # type: ignore[union-attr]
            acknowledge(
                subnet.node.find_child("DefaultRoute"),
                (
                    "NIST.800.53.R5-VPCNoUnrestrictedRouteToIGW",
                    "Public subnets hold only the NAT gateways; their default route must reach the internet gateway.",
                ),
            )
        acknowledge(
            self.vpc.node.default_child,  # type: ignore[arg-type]
            (
                "NIST.800.53.R5-VPCDefaultSecurityGroupClosed",
                "Nothing in this app uses the default security group; closing it needs a Lambda-backed custom resource, which adds more surface than it removes.",
            ),
        )

        self.security_group = self._shared_security_group(network_config)
        self.hyperpod_subnets = self._hyperpod_subnets(network_config)
        self._endpoints(network_config)
        self.flow_log_key, self.flow_log_group = self._flow_logs(network_config, removal_policy)

    # -----------------------------------------------------------------------------------------

    def _shared_security_group(self, network: Network) -> ec2.SecurityGroup:
        sg = ec2.SecurityGroup(
            self,
            "SharedSecurityGroup",
            vpc=self.vpc,
            description="HyperPod nodes, EKS control plane and FSx for Lustre",
            # Egress to the group itself (EFA) and out (images, AWS APIs) is all egress.
            allow_all_outbound=True,
        )
        # EFA and NCCL need every protocol between the nodes of one group.
        sg.add_ingress_rule(sg, ec2.Port.all_traffic(), "All traffic within the group (EFA, NCCL, kubelet)")
        self_rule = next(c for c in sg.node.children if c.node.id.endswith(":ALL TRAFFIC"))
        acknowledge(
            self_rule,
            (
                "NIST.800.53.R5-EC2RestrictedCommonPorts",
                "The source is this security group itself, not the internet; EFA requires all traffic between members.",
            ),
        )
        # EFA also needs an outbound rule naming the group itself: its OS-bypass traffic is not
        # covered by the 0.0.0.0/0 rule (EC2 user guide, "Prepare an EFA-enabled security group";
        # EKS adds the same rule to its cluster group, EKS user guide "sec-group-reqs"). The L2
        # drops egress rules while it allows all outbound, so the rule is written directly.
        ec2.CfnSecurityGroupEgress(
            self,
            "SharedSecurityGroupEfaEgress",
            group_id=sg.security_group_id,
            destination_security_group_id=sg.security_group_id,
            ip_protocol="-1",
            description="All traffic to the group itself (EFA)",
        )
        for port in lustre_ports():
            sg.add_ingress_rule(sg, port, "Lustre from the group")
        for cidr in [network.vpc_cidr, *network.hyperpod_cidr_blocks]:
            sg.add_ingress_rule(
                ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), f"HTTPS to endpoints and the EKS API from {cidr}"
            )
        return sg

    def _hyperpod_subnets(self, network: Network) -> dict[str, ec2.Subnet]:
        blocks = []
        for i, cidr in enumerate(network.hyperpod_cidr_blocks):
            block = ec2.CfnVPCCidrBlock(self, f"HyperPodCidrBlock{i}", vpc_id=self.vpc.vpc_id, cidr_block=cidr)
            blocks.append(block)
        gateways = {gw.az: gw.gateway_id for gw in self._nat_gateways()}
        az_name_by_id = {z.id: z.name for z in network.availability_zones}
        subnets: dict[str, ec2.Subnet] = {}
        for s in network.hyperpod_subnets:
            az_name = az_name_by_id[s.az_id]  # one of the VPC's AZs (config/network.py)
            suffix = s.az_id.replace("-", "").capitalize()
            subnet = ec2.Subnet(
                self,
                f"HyperPodSubnet{suffix}",
                vpc_id=self.vpc.vpc_id,
                cidr_block=s.cidr,
                # The L2 wants an AZ name; CloudFormation is given the AZ ID instead (below).
                availability_zone=az_name,
                map_public_ip_on_launch=False,
            )
            _pin_to_az_id(subnet, s.az_id)
            for block in blocks:
                subnet.node.add_dependency(block)
            # Its own AZ's NAT gateway; with fewer gateways than AZs (outside production), the first.
            nat = gateways.get(az_name)
            if nat is None and gateways:
                nat = next(iter(gateways.values()))
            if nat is not None:
                subnet.add_default_nat_route(nat)
            subnets[s.az_id] = subnet
        return subnets

    def _nat_gateways(self) -> list[ec2.GatewayConfig]:
        out = []
        for subnet in self.vpc.public_subnets:
            for child in subnet.node.children:
                if isinstance(child, ec2.CfnNatGateway):
                    out.append(ec2.GatewayConfig(az=subnet.availability_zone, gateway_id=child.ref))
        return out

    def _endpoints(self, network: Network) -> None:
        subnets = [ec2.SubnetSelection(subnets=list(self.hyperpod_subnets.values()))]
        self.vpc.add_gateway_endpoint(
            "S3Endpoint",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS), *subnets],
        )
        if not network.aws_interface_endpoints:
            return
        region = Stack.of(self).region
        for name in INTERFACE_ENDPOINTS:
            cid = "".join(p.capitalize() for p in name.replace("-", ".").split(".")) + "Endpoint"
            self.vpc.add_interface_endpoint(
                cid,
                service=ec2.InterfaceVpcEndpointService(f"com.amazonaws.{region}.{name}", 443),
                private_dns_enabled=True,
                # The shared group already admits 443 from the literal VPC CIDR; open=True would add
                # a rule with a CIDR token that cdk-nag cannot read.
                open=False,
                security_groups=[self.security_group],
                subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            )

    def _flow_logs(self, network: Network, removal_policy: RemovalPolicy) -> tuple[kms.Key, logs.LogGroup]:
        key = kms.Key(
            self,
            "FlowLogKey",
            description="Encrypts the VPC flow log group",
            enable_key_rotation=True,
            removal_policy=removal_policy,
            pending_window=Duration.days(30),
        )
        allow_log_groups(key, sid="AllowCloudWatchLogs", names="*")
        group = logs.LogGroup(
            self,
            "FlowLogGroup",
            encryption_key=key,
            removal_policy=removal_policy,
        )
        # Days validated by the config model against CloudWatch Logs' allowed periods.
        group.node.default_child.retention_in_days = network.flow_log_retention_days  # type: ignore[union-attr]
        role = iam.Role(
            self,
            "FlowLogRole",
            assumed_by=iam.ServicePrincipal("vpc-flow-logs.amazonaws.com"),
            description="Lets VPC Flow Logs write to the flow log group",
        )
        acknowledge(
            role,
            (
                "NIST.800.53.R5-IAMNoInlinePolicy",
                "The inline policy is generated by the FlowLog construct and scoped to this one log group.",
            ),
        )
        ec2.FlowLog(
            self,
            "FlowLog",
            resource_type=ec2.FlowLogResourceType.from_vpc(self.vpc),
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(group, role),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        return key, group


def _pin_to_az_id(subnet: ec2.ISubnet, az_id: str) -> None:
    """Give CloudFormation the AZ ID, which means the same zone in every account, not the name."""
    cfn: ec2.CfnSubnet = subnet.node.default_child  # type: ignore[assignment]
    cfn.add_property_deletion_override("AvailabilityZone")
    cfn.availability_zone_id = az_id


def allow_log_groups(key: kms.IKey, *, sid: str, names: str) -> None:
    """Let CloudWatch Logs of this stack's region use ``key`` for the log groups whose names match
    ``names`` (a wildcard pattern), through the encryption context CloudWatch Logs sends."""
    stack = Stack.of(key)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{names}"
                }
            },
        )
    )


# (construct id, group, source group, protocol, (from port, to port), description)
IngressSpec = tuple[str, str, str, str, tuple[int, int], str]


def ingress_rules(scope: Construct, specs: Iterable[IngressSpec]) -> list[ec2.CfnSecurityGroupIngress]:
    """One ingress rule per spec: ``group`` admits ``source`` on the protocol's port range."""
    return [
        ec2.CfnSecurityGroupIngress(
            scope,
            cid,
            group_id=group,
            source_security_group_id=source,
            ip_protocol=protocol,
            from_port=lo,
            to_port=hi,
            description=description,
        )
        for cid, group, source, protocol, (lo, hi), description in specs
    ]
