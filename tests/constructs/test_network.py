"""PlatformNetwork: VPC, HyperPod subnets by AZ ID, shared security group, endpoints, flow logs."""

from __future__ import annotations

from aws_cdk.assertions import Match

from tests.conftest import stack_template_fixtures

dev, prod = stack_template_fixtures("network", "dev", "prod")


def test_vpc_cidr_and_dns(dev):
    config, t = dev
    t.has_resource_properties(
        "AWS::EC2::VPC",
        {"CidrBlock": config.network.vpc_cidr, "EnableDnsHostnames": True, "EnableDnsSupport": True},
    )


def test_public_and_private_subnets_per_az_pinned_by_az_id(dev):
    config, t = dev
    subnets = t.find_resources("AWS::EC2::Subnet")
    az_ids = [s["Properties"].get("AvailabilityZoneId") for s in subnets.values()]
    assert all("AvailabilityZone" not in s["Properties"] for s in subnets.values())
    n_az = len(config.network.availability_zones)
    n_hp = len(config.network.hyperpod_subnets)
    assert len(subnets) == 2 * n_az + n_hp
    for z in config.network.availability_zones:
        assert az_ids.count(z.id) >= 2
    public = [s for s in subnets.values() if s["Properties"]["MapPublicIpOnLaunch"] is False]
    assert len(public) == len(subnets)


def test_one_nat_in_dev_one_per_az_in_prod(dev, prod):
    assert len(dev[1].find_resources("AWS::EC2::NatGateway")) == 1
    config, t = prod
    assert len(t.find_resources("AWS::EC2::NatGateway")) == len(config.network.availability_zones) == 3


def test_hyperpod_secondary_cidr_and_subnets(prod):
    config, t = prod
    for cidr in config.network.hyperpod_cidr_blocks:
        t.has_resource_properties("AWS::EC2::VPCCidrBlock", {"CidrBlock": cidr})
    blocks = list(t.find_resources("AWS::EC2::VPCCidrBlock"))
    subnets = t.find_resources("AWS::EC2::Subnet")
    for s in config.network.hyperpod_subnets:
        (res,) = [v for v in subnets.values() if v["Properties"]["CidrBlock"] == s.cidr]
        assert res["Properties"]["AvailabilityZoneId"] == s.az_id
        assert set(blocks) <= set(res.get("DependsOn", []))


def test_hyperpod_subnet_routes_to_nat_in_its_own_az(prod):
    config, t = prod
    nats = t.find_resources("AWS::EC2::NatGateway")
    subnets = t.find_resources("AWS::EC2::Subnet")
    az_of_public = {k: v["Properties"]["AvailabilityZoneId"] for k, v in subnets.items()}
    nat_az = {k: az_of_public[v["Properties"]["SubnetId"]["Ref"]] for k, v in nats.items()}
    tables = t.find_resources("AWS::EC2::SubnetRouteTableAssociation")
    routes = t.find_resources("AWS::EC2::Route")
    for s in config.network.hyperpod_subnets:
        sid = next(k for k, v in subnets.items() if v["Properties"]["CidrBlock"] == s.cidr)
        rt = next(
            v["Properties"]["RouteTableId"]["Ref"] for v in tables.values() if v["Properties"]["SubnetId"]["Ref"] == sid
        )
        nat = next(
            v["Properties"]["NatGatewayId"]["Ref"]
            for v in routes.values()
            if v["Properties"]["RouteTableId"]["Ref"] == rt and "NatGatewayId" in v["Properties"]
        )
        assert nat_az[nat] == s.az_id


def test_shared_security_group_rules(dev):
    config, t = dev
    ((sg_id, sg),) = t.find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("HyperPod")}}
    ).items()
    ingress = sg["Properties"]["SecurityGroupIngress"]
    cidrs = {r["CidrIp"] for r in ingress if r["FromPort"] == 443}
    assert cidrs == {config.network.vpc_cidr, *config.network.hyperpod_cidr_blocks}
    assert sg["Properties"]["SecurityGroupEgress"] == [
        {"CidrIp": "0.0.0.0/0", "Description": "Allow all outbound traffic by default", "IpProtocol": "-1"}
    ]
    self_rules = [
        r["Properties"]
        for r in t.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["SourceSecurityGroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}
    ]
    assert {(r["IpProtocol"], r.get("FromPort"), r.get("ToPort")) for r in self_rules} == {
        ("-1", None, None),
        ("tcp", 988, 988),
        ("tcp", 1018, 1023),
        # Added by the FSx L2 construct (its default Lustre port range) when it joins the group.
        ("tcp", 988, 1023),
    }


def test_s3_gateway_endpoint_always(dev):
    _, t = dev
    t.has_resource_properties("AWS::EC2::VPCEndpoint", {"VpcEndpointType": "Gateway"})
    assert len(t.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}})) == 0


def test_interface_endpoints_when_configured(prod):
    config, t = prod
    assert config.network.aws_interface_endpoints
    endpoints = t.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}})
    names = {e["Properties"]["ServiceName"].split(f"{config.region}.", 1)[1] for e in endpoints.values()}
    required = {
        "ec2",
        "ecr.api",
        "ecr.dkr",
        "sts",
        "logs",
        "monitoring",
        "ssm",
        "ssmmessages",
        "ec2messages",
        "eks-auth",
        "sagemaker.api",
    }
    assert required <= names
    assert all(e["Properties"]["PrivateDnsEnabled"] for e in endpoints.values())


def test_flow_logs_to_kms_encrypted_group_with_retention(dev):
    config, t = dev
    t.has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"}
    )
    t.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "RetentionInDays": config.network.flow_log_retention_days,
            "KmsKeyId": Match.object_like({"Fn::GetAtt": Match.any_value()}),
        },
    )
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_network_logical_ids_are_stable(dev):
    """Renaming these replaces the VPC or its subnets: a deliberate change must update this test."""
    _, t = dev
    resources = t.to_json()["Resources"]
    for logical_id in [
        "NetworkVpc7FB7348F",
        "NetworkHyperPodCidrBlock03F9CCAE9",
        "NetworkHyperPodSubnetUse1az4Subnet3C20CC44",
        "NetworkSharedSecurityGroup90AC47FC",
        "NetworkFlowLogKeyF785E5F9",
        "NetworkFlowLogGroup4F8CEEEF",
    ]:
        assert logical_id in resources, sorted(k for k in resources if k.startswith("Network"))[:40]


def test_efa_egress_names_the_group_itself(dev):
    """EFA needs an outbound rule to the group itself; the 0.0.0.0/0 rule does not carry it."""
    _, t = dev
    ((sg_id, _),) = t.find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("HyperPod")}}
    ).items()
    (egress,) = t.find_resources("AWS::EC2::SecurityGroupEgress").values()
    ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    assert egress["Properties"] == {
        "GroupId": ref,
        "DestinationSecurityGroupId": ref,
        "IpProtocol": "-1",
        "Description": "All traffic to the group itself (EFA)",
    }
