"""The EKS control plane, the `system` node group, managed add-ons and access entries."""

from __future__ import annotations

import dataclasses
import json

import pytest

from config import versions
from manifests import registry
from tests.conftest import template_of


@pytest.fixture(scope="module")
def dev(synthesized):
    _, config, stacks = synthesized("dev")
    return config, stacks, template_of(stacks.cluster)


@pytest.fixture(scope="module")
def prod(synthesized):
    _, config, stacks = synthesized("prod")
    return config, stacks, template_of(stacks.cluster)


def resources(template, kind: str) -> dict[str, dict]:
    return {k: v for k, v in template.to_json()["Resources"].items() if v["Type"] == kind}


def only(template, kind: str) -> dict:
    found = resources(template, kind)
    assert len(found) == 1, sorted(found)
    return next(iter(found.values()))


def logical_id(stack, construct) -> str:
    return stack.get_logical_id(construct.node.default_child)


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_native_cluster_with_config_version_and_api_and_config_map(fixture, request):
    config, _, template = request.getfixturevalue(fixture)
    cluster = only(template, "AWS::EKS::Cluster")["Properties"]
    assert cluster["Name"] == config.eks_cluster_name
    assert cluster["Version"] == config.eks.kubernetes_version
    assert cluster["AccessConfig"] == {
        "AuthenticationMode": "API_AND_CONFIG_MAP",
        "BootstrapClusterCreatorAdminPermissions": False,
    }
    assert cluster["AccessConfig"]["AuthenticationMode"] in versions.HYPERPOD_AUTHENTICATION_MODES
    assert cluster["BootstrapSelfManagedAddons"] is False
    # No Auto Mode.
    assert cluster["ComputeConfig"] == {"Enabled": False}
    assert cluster["StorageConfig"] == {"BlockStorage": {"Enabled": False}}
    assert not resources(template, "Custom::AWSCDK-EKS-Cluster")


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_upgrade_policy_is_explicitly_extended(fixture, request):
    """EKS never upgrades the control plane by itself at the end of standard support."""
    _, _, template = request.getfixturevalue(fixture)
    cluster = only(template, "AWS::EKS::Cluster")["Properties"]
    assert cluster["UpgradePolicy"] == {"SupportType": "EXTENDED"}


def _warnings(synthesized, env: str) -> list[str]:
    """The warnings synth records on the cluster stack (its assembly metadata)."""
    from pathlib import Path

    assembly, _, stacks = synthesized(env)
    meta = json.loads((Path(assembly.directory) / f"{stacks.cluster.artifact_id}.metadata.json").read_text())
    return [e["data"] for entries in meta.values() for e in entries if e["type"] == "aws:cdk:warning"]


def test_unacknowledged_extended_support_warns_with_the_monthly_extra_cost(dev, synthesized):
    """dev runs the newest HyperPod version, past standard support on the pinned status date and
    not acknowledged: synth warns (templates unchanged), naming the cost from the price table."""
    from config.prices import load_prices

    config, _, _ = dev
    version = config.eks.kubernetes_version
    assert version == versions.newest_kubernetes_version()
    assert versions.in_extended_support(version) and not config.eks.extended_support_acknowledged
    prices = load_prices()
    extended, standard = prices.price("eks_cluster_extended_hourly"), prices.price("eks_cluster_hourly")
    extra = (extended - standard) * prices.hours
    _, end_standard, end_extended = versions.EKS_CALENDAR[version]
    assert _warnings(synthesized, "dev") == [
        f"Kubernetes {version} left EKS standard support on {end_standard.isoformat()} (extended support until "
        f"{end_extended.isoformat()}): this cluster costs ${extra:,.2f} a month more than standard support "
        f"({prices.hours:g} h x ${extended:.2f} instead of ${standard:.2f} per cluster-hour, config/prices.yaml). "
        "Set eks.extended_support_acknowledged: true to accept it, or plan an upgrade (hpray upgrade plan). "
        "[ack: hpray:eks-extended-support]"
    ]
    assert f"${extra:,.2f}" == "$365.00"  # 730 h x ($0.60 - $0.10)


def test_acknowledged_extended_support_does_not_warn(prod, synthesized):
    config, _, _ = prod
    assert config.eks.extended_support_acknowledged and versions.in_extended_support(config.eks.kubernetes_version)
    assert _warnings(synthesized, "prod") == []


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_all_five_control_plane_log_types(fixture, request):
    _, _, template = request.getfixturevalue(fixture)
    logging = only(template, "AWS::EKS::Cluster")["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert sorted(t["Type"] for t in logging) == ["api", "audit", "authenticator", "controllerManager", "scheduler"]


def test_secrets_encrypted_with_the_platform_key(dev):
    _, stacks, template = dev
    encryption = only(template, "AWS::EKS::Cluster")["Properties"]["EncryptionConfig"]
    assert encryption[0]["Resources"] == ["secrets"]
    key_id = stacks.storage.get_logical_id(stacks.storage.platform_key.node.default_child)
    assert key_id in json.dumps(encryption[0]["Provider"]["KeyArn"])


def test_dev_endpoint_is_public_only_from_listed_cidrs(dev):
    config, _, template = dev
    vpc = only(template, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    assert vpc["EndpointPrivateAccess"] is True
    assert vpc["EndpointPublicAccess"] is True
    assert vpc["PublicAccessCidrs"] == config.eks.public_access_cidrs == ["203.0.113.0/24"]


def test_prod_endpoint_is_private(prod):
    _, _, template = prod
    vpc = only(template, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    assert vpc["EndpointPrivateAccess"] is True
    assert vpc["EndpointPublicAccess"] is False
    assert "PublicAccessCidrs" not in vpc


def test_control_plane_in_private_subnets_with_the_shared_group(prod):
    _, stacks, template = prod
    vpc_config = only(template, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    network = stacks.network
    private = {network.get_logical_id(s.node.default_child) for s in network.network.vpc.private_subnets}
    public = {network.get_logical_id(s.node.default_child) for s in network.network.vpc.public_subnets}
    subnet_refs = json.dumps(vpc_config["SubnetIds"])
    assert all(s in subnet_refs for s in private)
    assert not any(s in subnet_refs for s in public)
    assert len(vpc_config["SubnetIds"]) == len(private) == 3
    sg = network.get_logical_id(network.network.security_group.node.default_child)
    assert sg in json.dumps(vpc_config["SecurityGroupIds"])


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_one_system_managed_node_group_from_config(fixture, request):
    config, _, template = request.getfixturevalue(fixture)
    nodes = config.eks.system_nodes
    group = only(template, "AWS::EKS::Nodegroup")["Properties"]
    assert group["NodegroupName"] == "system"
    assert group["InstanceTypes"] == [nodes.instance_type]
    assert group["ScalingConfig"] == {
        "MinSize": nodes.min_size,
        "DesiredSize": nodes.desired_size,
        "MaxSize": nodes.max_size,
    }
    assert group["DiskSize"] == nodes.disk_size_gib
    assert group["CapacityType"] == "ON_DEMAND"
    assert group["AmiType"] == "AL2023_x86_64_STANDARD"


def test_prod_system_nodes_differ_from_dev(dev, prod):
    assert dev[0].eks.system_nodes.instance_type == "m7i.xlarge"
    assert prod[0].eks.system_nodes.instance_type == "m7i.2xlarge"
    assert only(prod[2], "AWS::EKS::Nodegroup")["Properties"]["DiskSize"] == 200


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_managed_addons_pinned_in_one_place(fixture, request):
    config, _, template = request.getfixturevalue(fixture)
    pins = versions.ADDON_VERSIONS[config.eks.kubernetes_version]
    addons = {r["Properties"]["AddonName"]: r["Properties"] for r in resources(template, "AWS::EKS::Addon").values()}
    expected = {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-fsx-csi-driver"}
    if config.eks.ray_token_auth:
        expected.add("aws-secrets-store-csi-driver-provider")
    if config.eks.cloudwatch_observability:
        expected.add("amazon-cloudwatch-observability")
    assert set(addons) == expected
    for name, props in addons.items():
        assert props["AddonVersion"] == pins[name]
        assert props["ResolveConflicts"] == "OVERWRITE"
    assert versions.semver(addons["vpc-cni"]["AddonVersion"]) >= (1, 18, 3)


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_vpc_cni_enforces_network_policies(fixture, request):
    _, _, template = request.getfixturevalue(fixture)
    cni = next(
        r["Properties"]
        for r in resources(template, "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "vpc-cni"
    )
    assert json.loads(cni["ConfigurationValues"]) == {
        "enableNetworkPolicy": "true",
        # Security groups for pods (the Ray heads' own group, constructs/ray_heads.py), in the
        # mode that keeps the Pod Identity agent reachable.
        "env": {"ENABLE_POD_ENI": "true", "POD_SECURITY_GROUP_ENFORCING_MODE": "standard"},
        "init": {"env": {"DISABLE_TCP_EARLY_DEMUX": "true"}},
    }
    # The network policy agent ships with the VPC CNI from 1.14.
    assert versions.semver(cni["AddonVersion"]) >= (1, 14, 0)


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_the_cluster_role_may_manage_trunk_interfaces(fixture, request):
    """EKS's VPC resource controller attaches the trunk and branch interfaces of security groups
    for pods with the cluster role."""
    _, _, template = request.getfixturevalue(fixture)
    roles = [
        r["Properties"]
        for r in resources(template, "AWS::IAM::Role").values()
        if "eks.amazonaws.com" in json.dumps(r["Properties"].get("AssumeRolePolicyDocument"))
    ]
    arns = [json.dumps(a) for r in roles for a in r.get("ManagedPolicyArns", [])]
    assert any("AmazonEKSVPCResourceController" in a for a in arns), arns
    assert any("AmazonEKSClusterPolicy" in a for a in arns)


def test_cloudwatch_observability_behind_the_switch(dev, prod):
    # On in every environment: its Fluent Bit ships the container logs (config/observability.py).
    assert dev[0].eks.cloudwatch_observability is True
    assert prod[0].eks.cloudwatch_observability is True
    names = lambda t: {r["Properties"]["AddonName"] for r in resources(t, "AWS::EKS::Addon").values()}  # noqa: E731
    assert "amazon-cloudwatch-observability" in names(dev[2])
    assert "amazon-cloudwatch-observability" in names(prod[2])
    observability = next(
        r
        for r in resources(prod[2], "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
    )
    assert observability["Properties"]["PodIdentityAssociations"][0]["ServiceAccount"] == "cloudwatch-agent"
    # Off: no add-on, no agent role.
    import aws_cdk as cdk

    from app import APP_PROPS, build_app
    from tests.conftest import cdk_context, template_of

    config = dev[0]
    off = config.model_copy(update={"eks": config.eks.model_copy(update={"cloudwatch_observability": False})})
    app = cdk.App(context={**APP_PROPS["context"], **cdk_context()}, stack_traces=False)
    stacks = build_app(app, off)
    assert "amazon-cloudwatch-observability" not in names(template_of(stacks.cluster))
    assert not hasattr(stacks.cluster.eks, "cloudwatch_role")


def test_fsx_csi_driver_has_a_least_privilege_pod_identity_role(dev):
    _, stacks, template = dev
    cluster = stacks.cluster
    fsx = next(
        r
        for r in resources(template, "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "aws-fsx-csi-driver"
    )
    association = fsx["Properties"]["PodIdentityAssociations"]
    role_id = logical_id(cluster, cluster.eks.fsx_csi_role)
    assert association == [{"RoleArn": {"Fn::GetAtt": [role_id, "Arn"]}, "ServiceAccount": "fsx-csi-controller-sa"}]
    role = template.to_json()["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
        }
    ]
    assert "ManagedPolicyArns" not in role
    policy = next(
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    )
    actions = {s["Sid"]: (s["Action"], s["Resource"]) for s in policy}
    assert actions["DescribeFileSystems"] == ("fsx:DescribeFileSystems", "*")
    update_action, update_resource = actions["ResizeThisFileSystem"]
    assert update_action == "fsx:UpdateFileSystem"
    assert ":file-system/" in json.dumps(update_resource)
    assert not any("Create" in str(a) or "Delete" in str(a) for a, _ in actions.values())


def test_admin_access_entries_from_config(dev):
    config, _, template = dev
    entries = [r["Properties"] for r in resources(template, "AWS::EKS::AccessEntry").values()]
    admins = [e for e in entries if e["PrincipalArn"] in config.eks.admin_principal_arns]
    assert len(admins) == len(config.eks.admin_principal_arns) == 1
    assert admins[0]["AccessPolicies"] == [
        {
            "AccessScope": {"Type": "cluster"},
            "PolicyArn": {
                "Fn::Join": [
                    "",
                    ["arn:", {"Ref": "AWS::Partition"}, ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"],
                ]
            },
        }
    ]
    # The only other entry is the kubectl provider's own; none for HyperPod's execution role
    # (HyperPod creates that one itself).
    others = [e for e in entries if e not in admins]
    assert len(others) == 1
    assert "KubectlProvider" in json.dumps(others[0]["PrincipalArn"])


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_secrets_store_csi_driver_addon_serves_token_auth(fixture, request):
    """Token auth is on in every environment, so the driver and its AWS provider are installed:
    every node (tainted HyperPod nodes too) runs both, and the driver syncs Kubernetes Secrets."""
    config, stacks, template = request.getfixturevalue(fixture)
    assert config.eks.ray_token_auth is True
    addon = next(
        r
        for r in resources(template, "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "aws-secrets-store-csi-driver-provider"
    )
    props = addon["Properties"]
    assert props["AddonVersion"] == versions.SECRETS_STORE_ADDON
    assert json.loads(props["ConfigurationValues"]) == {
        "tolerations": [{"operator": "Exists"}],
        "secrets-store-csi-driver": {
            "linux": {"tolerations": [{"operator": "Exists"}]},
            "syncSecret": {"enabled": True},
        },
    }
    # ASCP reads secrets with the mounting pod's identity: the add-on has no role of its own.
    assert "PodIdentityAssociations" not in props and "ServiceAccountRoleArn" not in props
    cluster = stacks.cluster
    assert set(addon["DependsOn"]) >= {
        logical_id(cluster, cluster.eks.system_nodegroup),
        cluster.get_logical_id(cluster.eks.addons["eks-pod-identity-agent"]),
    }


def test_addon_and_nodegroup_order(dev):
    """vpc-cni, kube-proxy and the Pod Identity agent come before the nodes; CoreDNS and the CSI
    driver (Deployments) after them."""
    _, stacks, template = dev
    cluster = stacks.cluster
    res = template.to_json()["Resources"]
    nodegroup_id = logical_id(cluster, cluster.eks.system_nodegroup)
    addon_ids = {name: cluster.get_logical_id(a) for name, a in cluster.eks.addons.items()}
    nodegroup_deps = set(res[nodegroup_id]["DependsOn"])
    assert {addon_ids["vpc-cni"], addon_ids["kube-proxy"], addon_ids["eks-pod-identity-agent"]} <= nodegroup_deps
    for late in ("coredns", "aws-fsx-csi-driver"):
        assert nodegroup_id in res[addon_ids[late]]["DependsOn"]
    assert addon_ids["eks-pod-identity-agent"] in res[addon_ids["aws-fsx-csi-driver"]]["DependsOn"]


def test_kubectl_provider_runs_in_private_subnets(dev):
    _, stacks, template = dev
    handler = stacks.cluster.cluster.node.find_child("KubectlProvider").node.find_child("Handler")
    props = template.to_json()["Resources"][logical_id(stacks.cluster, handler)]["Properties"]
    assert props["VpcConfig"]["SubnetIds"]
    assert props["Layers"] and len(props["Layers"]) == 2  # awscli + pinned kubectl layer


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_node_pools_are_joined(fixture, request):
    """The system nodes have only the EKS-created cluster group; HyperPod nodes and FSx the shared
    one: DNS and Ray both ways, and Lustre from the heads, need rules between the two."""
    _, stacks, t = request.getfixturevalue(fixture)
    cluster = stacks.cluster
    cluster_group = {"Fn::GetAtt": [logical_id(cluster, cluster.cluster), "ClusterSecurityGroupId"]}
    shared = cluster.resolve(stacks.network.network.security_group.security_group_id)
    rules = {
        (
            json.dumps(r["Properties"]["GroupId"]),
            json.dumps(r["Properties"]["SourceSecurityGroupId"]),
            r["Properties"]["IpProtocol"],
            r["Properties"]["FromPort"],
            r["Properties"]["ToPort"],
        )
        for lid, r in resources(t, "AWS::EC2::SecurityGroupIngress").items()
        # The metrics collector's, the GCS store's and the Ray heads' rules belong to
        # constructs/observability.py, gcs_store.py and ray_heads.py (their own tests; the
        # review proves every flow).
        if not lid.startswith(("Observability", "GcsStore", "RayHeads"))
    }
    to_system, to_shared = json.dumps(cluster_group), json.dumps(shared)
    assert rules == {
        (to_system, to_shared, "udp", 53, 53),
        (to_system, to_shared, "tcp", 0, 65535),
        (to_shared, to_system, "tcp", 0, 65535),
        (to_shared, to_system, "tcp", 988, 988),
        (to_shared, to_system, "tcp", 1018, 1023),
    }


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_cloudwatch_agent_writes_only_its_own_log_groups(fixture, request):
    """No CloudWatchAgentServerPolicy (logs writes and CreateLogGroup on every group): every logs
    action of the agent's role names the container log groups; only the actions without
    resource-level permissions are on '*'."""
    from config import observability as obs

    config, stacks, template = request.getfixturevalue(fixture)
    role_id = logical_id(stacks.cluster, stacks.cluster.eks.cloudwatch_role)
    role = template.to_json()["Resources"][role_id]["Properties"]
    assert "ManagedPolicyArns" not in role
    assert "CloudWatchAgentServerPolicy" not in json.dumps(template.to_json())
    statements = [
        st
        for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = lambda st: st["Action"] if isinstance(st["Action"], list) else [st["Action"]]  # noqa: E731
    on_star = sorted(a for st in statements if st["Resource"] == "*" for a in actions(st))
    assert on_star == ["cloudwatch:PutMetricData", "ec2:DescribeTags", "ec2:DescribeVolumes"]
    [logs] = [st for st in statements if any(a.startswith("logs:") for a in actions(st))]
    assert sorted(actions(logs)) == sorted(obs.CONTAINER_LOG_WRITER_ACTIONS)
    text = json.dumps(logs["Resource"])
    for kind in obs.CONTAINER_LOG_KINDS:
        assert f"log-group:{obs.container_log_group(config.eks_cluster_name, kind)}" in text
    assert len(logs["Resource"]) == 2 * len(obs.CONTAINER_LOG_KINDS)  # each group, and its streams
    assert all(st["Effect"] == "Allow" for st in statements)


def test_what_is_installed_on_the_cluster_waits_for_its_nodes_and_every_addon(dev):
    """PlatformEksCluster.install: the scraper's RBAC and the HyperPod namespace wait for exactly
    the system nodes and every add-on; the KubeRay chart for those and the Ray namespace (beside
    what aws-cdk-lib adds inside the cluster construct: its kubectl barrier, the node role)."""
    _, stacks, template = dev
    cluster = stacks.cluster
    res = template.to_json()["Resources"]
    ready = {logical_id(cluster, cluster.eks.system_nodegroup)} | {
        cluster.get_logical_id(a) for a in cluster.eks.addons.values()
    }
    assert len(ready) == 1 + len(cluster.eks.addons) >= 5
    for installed in (cluster.observability.rbac, cluster.hyperpod_node_dependencies.namespace):
        assert _ours(res[logical_id(cluster, installed)]["DependsOn"]) == ready
    chart = cluster.kuberay.chart.node.find_child("Resource").node.default_child
    namespace = logical_id(cluster, cluster.workloads.namespace)
    assert _ours(res[cluster.get_logical_id(chart)]["DependsOn"]) == ready | {namespace}


def test_requires_orders_after_the_named_addons_only(dev):
    """PlatformEksCluster.requires: the Ray namespace waits for the Pod Identity agent alone."""
    _, stacks, template = dev
    cluster = stacks.cluster
    res = template.to_json()["Resources"]
    agent = cluster.get_logical_id(cluster.eks.addons["eks-pod-identity-agent"])
    assert _ours(res[logical_id(cluster, cluster.workloads.namespace)]["DependsOn"]) == {agent}


def _ours(depends_on: list[str]) -> set[str]:
    """DependsOn without what aws-cdk-lib adds itself: the cluster's kubectl barrier, and the
    node group's role beside the node group."""
    return {d for d in depends_on if "KubectlReadyBarrier" not in d and "SystemNodesNodeGroupRole" not in d}


# The EKS coredns add-on's own tolerations (its Deployment as EKS installs it).
COREDNS_DEFAULT_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_coredns_runs_only_where_every_dns_client_reaches_it(env, synthesized):
    """CoreDNS as the synthesized add-on configures it can be scheduled on the system nodes only:
    the part the flow table places on "system-nodes", whose security group admits DNS over UDP and
    TCP from the HyperPod pods, the system pods and the Ray heads. (Unpinned, it could move onto a
    HyperPod node, which admits TCP only.) The placement check places the same pods."""
    from config.facts import addons
    from constructs.flows import PARTS
    from sizing import placement, pods, scheduling

    _, config, stacks = synthesized(env)
    [addon] = [
        r["Properties"]
        for r in resources(template_of(stacks.cluster), "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "coredns"
    ]
    values = json.loads(addon.get("ConfigurationValues", "{}"))
    pod = scheduling.pod_from_spec(
        "coredns",
        {
            "nodeSelector": values.get("nodeSelector") or {},
            "containers": [{"resources": values.get("resources") or {}}],
            "tolerations": COREDNS_DEFAULT_TOLERATIONS,
        },
        replicas=values.get("replicaCount", 2),
    )
    where = sorted(p.name for p in pods.pools(config) if scheduling.selects(pod, p))
    assert where == ["system"]
    assert PARTS["coredns"].on == "system-nodes"
    # The placement check's CoreDNS pods are the add-on's (it leaves the tolerations out).
    [placed] = [p for p in placement.platform_pods(config, plan=registry.plan_of(config)) if p.name == "coredns"]
    assert dataclasses.replace(placed, tolerations=pod.tolerations) == pod
    assert values == addons.COREDNS_CONFIGURATION
