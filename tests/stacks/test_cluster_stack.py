"""The cluster stack: composition, outputs, what the HyperPod stack consumes, compliance."""

from __future__ import annotations

import pytest

from tests.conftest import template_of


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_cluster_stack_outputs_and_termination_protection(env, synthesized):
    _, config, stacks = synthesized(env)
    cluster = stacks.cluster
    assert cluster.stack_name == f"{''.join(p.capitalize() for p in config.name_prefix.split('-'))}Cluster"
    assert cluster.termination_protection is config.production
    outputs = template_of(cluster).to_json()["Outputs"]
    assert {"ClusterName", "ClusterArn", "UpdateKubeconfigCommand"} <= set(outputs)
    assert outputs["UpdateKubeconfigCommand"]["Value"] == (
        f"aws eks update-kubeconfig --name {config.eks_cluster_name} --region {config.region}"
    )


def test_depends_on_network_and_storage(synthesized):
    _, _, stacks = synthesized("dev")
    assert set(stacks.cluster.dependencies) == {stacks.network, stacks.storage}


def test_cluster_logical_id_is_stable(synthesized):
    """Renaming the cluster's construct path replaces the EKS cluster (and every HyperPod node)."""
    _, _, stacks = synthesized("prod")
    res = template_of(stacks.cluster).to_json()["Resources"]
    assert res["EksClusterB2BDED5B"]["Type"] == "AWS::EKS::Cluster"
    assert res["EksClusterNodegroupSystemNodes7D54C381"]["Type"] == "AWS::EKS::Nodegroup"


def test_hyperpod_interface(synthesized):
    """What the HyperPod stack uses: the cluster object and the dependency constructs."""
    _, _, stacks = synthesized("dev")
    cluster = stacks.cluster
    assert cluster.cluster is cluster.eks.cluster
    assert len(cluster.hyperpod_dependencies) == 4  # namespace, manifests, NVIDIA and EFA charts


def test_no_stack_declares_the_execution_roles_access_entry(synthesized):
    """HyperPod creates the access entry of its execution role when it creates the cluster; one
    declared by a stack would collide with it. The access entries of dev are the kubectl
    provider's and the admin role's, none names the execution role."""
    _, _, stacks = synthesized("dev")
    role_id = stacks.hyperpod.get_logical_id(stacks.hyperpod.execution_role.node.default_child)
    assert role_id == "HyperPodExecutionRoleC5E15D3D"
    assert template_of(stacks.hyperpod).to_json()["Resources"][role_id]["Type"] == "AWS::IAM::Role"
    entries = {
        (stack.stack_name, logical_id): resource["Properties"]["PrincipalArn"]
        for stack in (stacks.network, stacks.storage, stacks.cluster, stacks.hyperpod)
        for logical_id, resource in template_of(stack).to_json()["Resources"].items()
        if resource["Type"] == "AWS::EKS::AccessEntry"
    }
    assert entries == {
        ("HprayDevCluster", "EksClusterClusterAdminRoleAccess8D05B9EF"): {
            "Fn::GetAtt": ["EksClusterKubectlProviderHandlerServiceRole2B48112A", "Arn"]
        },
        ("HprayDevCluster", "EksAdmin06F978028"): "arn:aws:iam::111111111111:role/PlatformAdmin",
    }


def test_tags_reach_the_cluster(synthesized):
    _, config, stacks = synthesized("prod")
    res = template_of(stacks.cluster).to_json()["Resources"]
    cluster = res["EksClusterB2BDED5B"]["Properties"]
    tags = {t["Key"]: t["Value"] for t in cluster["Tags"]}
    assert set(config.tags.as_dict()) <= set(tags)


# What replaces what (create-only properties in the CloudFormation resource schemas that cfn-lint
# ships) and the config that feeds each. docs/configuration.md "Changes that replace resources" mirrors this.
REPLACED_BY = {
    "AWS::EKS::Cluster": {
        "Name": "name_prefix",
        "RoleArn": "(construct ID of the cluster role)",
        "EncryptionConfig": "the platform KMS key (storage stack)",
        "AccessConfig/BootstrapClusterCreatorAdminPermissions": "(fixed: false)",
        "BootstrapSelfManagedAddons": "(fixed: false)",
        "KubernetesNetworkConfig/IpFamily": "(fixed: ipv4)",
    },
    "AWS::EKS::Nodegroup": {
        "NodegroupName": "(fixed: system)",
        "InstanceTypes": "eks.system_nodes.instance_type",
        "DiskSize": "eks.system_nodes.disk_size_gib",
        "AmiType": "(fixed: AL2023_x86_64_STANDARD)",
        "CapacityType": "(fixed: ON_DEMAND)",
        "Subnets": "network (private subnets)",
        "NodeRole": "(construct ID of the node role)",
        "ClusterName": "name_prefix",
    },
}


def _set_paths(props: dict, path: str) -> bool:
    node = props
    for part in path.split("/"):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_replacement_triggers_are_known(synthesized):
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    _, _, stacks = synthesized("prod")
    res = template_of(stacks.cluster).to_json()["Resources"]
    for kind, documented in REPLACED_BY.items():
        create_only = {
            p.removeprefix("/properties/")
            for p in PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", kind).schema["createOnlyProperties"]
        }
        props = next(r["Properties"] for r in res.values() if r["Type"] == kind)
        used = {p for p in create_only if _set_paths(props, p)}
        assert used == set(documented), f"{kind}: create-only properties set here changed: {sorted(used)}"


def deployed_image_config_map(stack) -> dict:
    """The manifest of the ConfigMap the cluster stack writes with the image it deployed (its
    Fn::Join resolved against the stack's concrete account and region)."""
    import json

    from manifests import image

    res = template_of(stack).to_json()["Resources"]
    (manifest,) = [
        r["Properties"]["Manifest"]
        for r in res.values()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and image.DEPLOYED_CONFIGMAP in json.dumps(r["Properties"]["Manifest"])
    ]
    text = manifest if isinstance(manifest, str) else "".join(_resolve(p) for p in manifest["Fn::Join"][1])
    return json.loads(text)[0]


def _resolve(part) -> str:
    """A part of the manifest's Fn::Join: text, or the asset URI's Fn::Sub of the URL suffix."""
    if isinstance(part, str):
        return part
    assert set(part) == {"Fn::Sub"}, part
    return part["Fn::Sub"].replace("${AWS::URLSuffix}", "amazonaws.com")


def test_the_cluster_writes_the_image_it_deployed_for_hpray(synthesized):
    """What `hpray submit` runs is the image `cdk deploy` pushes (the asset's URI), read from the
    cluster: a ConfigMap in the workloads namespace, after the namespace."""
    from manifests import image
    from manifests.k8s import NAMESPACE

    _, config, stacks = synthesized("dev")
    cm = deployed_image_config_map(stacks.cluster)
    assert (cm["kind"], cm["metadata"]["namespace"], cm["metadata"]["name"]) == (
        "ConfigMap",
        NAMESPACE,
        image.DEPLOYED_CONFIGMAP,
    )
    asset_hash = stacks.cluster.workloads_image.asset.asset_hash
    assert cm["data"][image.DEPLOYED_KEY] == (
        f"{config.account}.dkr.ecr.{config.region}.amazonaws.com/"
        f"{image.repository_name(config.account, config.region)}:{asset_hash}"
    )
    deps = stacks.cluster.workloads_image_config.node.dependencies
    assert stacks.cluster.workloads.namespace in deps
