"""The HyperPod cluster and its execution role, as synthesized for every environment."""

from __future__ import annotations

import json

import pytest

from constructs.hyperpod_cluster import EC2_DESCRIBE_ACTIONS, ECR_PULL_ACTIONS, ENI_ACTIONS, ENI_NODE_ACTIONS
from constructs.lifecycle_scripts import content_hash

ENVS = ("dev", "staging", "prod")
# Pinned logical IDs: a change here replaces the cluster (or its role, which replaces the
# cluster's groups). If this fails, read docs/configuration.md "The HyperPod cluster" first.
CLUSTER_LOGICAL_ID = "HyperPodCluster11759092"
ROLE_LOGICAL_ID = "HyperPodExecutionRoleC5E15D3D"


@pytest.fixture(scope="module", params=ENVS)
def env(request, synthesized):
    assembly, config, stacks = synthesized(request.param)
    stack = stacks.hyperpod
    template = assembly.get_stack_by_name(stack.stack_name).template
    return config, stacks, stack, template


def resources(template, type_):
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def cluster_props(template):
    (cluster,) = resources(template, "AWS::SageMaker::Cluster").values()
    return cluster["Properties"]


def statements(template):
    (doc,) = [
        r["Properties"]["PolicyDocument"]
        for r in resources(template, "AWS::IAM::Policy").values()
        if r["Properties"]["Roles"] == [{"Ref": ROLE_LOGICAL_ID}]
    ]
    return {
        s.get("Sid", s["Action"] if isinstance(s["Action"], str) else "+".join(s["Action"])): s
        for s in doc["Statement"]
    }


def test_logical_ids_are_stable(env):
    _, _, _, template = env
    assert resources(template, "AWS::SageMaker::Cluster").keys() == {CLUSTER_LOGICAL_ID}
    assert template["Resources"][ROLE_LOGICAL_ID]["Type"] == "AWS::IAM::Role"


def test_create_only_properties(env):
    config, stacks, stack, template = env
    props = cluster_props(template)
    hp = stack.hyperpod
    assert props["ClusterName"] == config.hyperpod_cluster_name
    assert props["Orchestrator"] == {"Eks": {"ClusterArn": stack.resolve(hp.eks_cluster.cluster_arn)}}
    network = stacks.network.network
    assert props["VpcConfig"] == {
        "SecurityGroupIds": [stack.resolve(network.security_group.security_group_id)],
        "Subnets": [
            stack.resolve(network.hyperpod_subnets[s.az_id].subnet_id) for s in config.network.hyperpod_subnets
        ],
    }


def test_recovery_and_provisioning_mode(env):
    config, _, _, template = env
    props = cluster_props(template)
    assert props["NodeRecovery"] == config.hyperpod.node_recovery == "Automatic"
    assert props["NodeProvisioningMode"] == "Continuous"


def test_tags_from_config(env):
    config, _, _, template = env
    (cluster,) = resources(template, "AWS::SageMaker::Cluster").values()
    assert cluster["Properties"]["Tags"] == [{"Key": k, "Value": v} for k, v in config.tags.as_dict().items()]


def _group(env: str, account: str, **props) -> dict:
    """One instance group as CloudFormation holds it: what every group of ``env`` shares, then ``props``."""
    stack_prefix = {"dev": "HprayDev", "staging": "HprayStg", "prod": "HprayProd"}[env]
    name_prefix = {"dev": "hpray-dev", "staging": "hpray-stg", "prod": "hpray-prod"}[env]
    ebs = props.pop("VolumeSizeInGB")
    return {
        "ExecutionRole": {"Fn::GetAtt": [ROLE_LOGICAL_ID, "Arn"]},
        "InstanceStorageConfigs": [
            {
                "EbsVolumeConfig": {
                    "VolumeKmsKeyId": {
                        "Fn::ImportValue": f"{stack_prefix}Storage:ExportsOutputFnGetAttPlatformKey1C4A1A63Arn1AD0FED1"
                    },
                    "VolumeSizeInGB": ebs,
                }
            }
        ],
        "LifeCycleConfig": {
            "OnCreate": "on_create.sh",
            # The prefix is the scripts' content hash (constructs/lifecycle_scripts.py), not a mapping.
            "SourceS3Uri": f"s3://sagemaker-{name_prefix}-lifecycle-{account}-us-east-1/lifecycle-scripts/{content_hash()}/",
        },
        "OnStartDeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
        **props,
    }


def _cpu_group(env: str, account: str, **props) -> dict:
    """A group without GPUs: no deep health checks (HyperPod runs them on accelerated ones)."""
    out = _group(env, account, **props)
    del out["OnStartDeepHealthChecks"]
    return out


# Each environment's instance groups, written out from config/<env>.yaml by hand (not by the
# construct's own mapping): a mistake in the mapping fails here.
GOLDEN_GROUPS = {
    "dev": [
        _group(
            "dev",
            "111111111111",
            InstanceGroupName="gpu-workers",
            InstanceType="ml.g5.12xlarge",
            InstanceCount=2,
            ThreadsPerCore=1,
            VolumeSizeInGB=500,
            KubernetesConfig={"Labels": {"workload": "ray-gpu"}},
        )
    ],
    "staging": [
        _group(
            "staging",
            "222222222222",
            InstanceGroupName="gpu-workers",
            InstanceType="ml.g6e.12xlarge",
            InstanceCount=2,
            ThreadsPerCore=1,
            VolumeSizeInGB=1000,
            KubernetesConfig={"Labels": {"workload": "ray-gpu"}},
        ),
        _cpu_group(
            "staging",
            "222222222222",
            InstanceGroupName="data-cpu",
            InstanceType="ml.m7i.4xlarge",
            InstanceCount=1,
            ThreadsPerCore=2,
            VolumeSizeInGB=200,
            KubernetesConfig={"Labels": {"workload": "ray-data"}},
        ),
        _group(
            "staging",
            "222222222222",
            InstanceGroupName="batch-gpu",
            InstanceType="ml.g6e.12xlarge",
            InstanceCount=1,
            ThreadsPerCore=1,
            VolumeSizeInGB=500,
            KubernetesConfig={"Labels": {"workload": "ray-batch"}},
        ),
    ],
    "prod": [
        _group(
            "prod",
            "333333333333",
            InstanceGroupName="train-p5",
            InstanceType="ml.p5.48xlarge",
            InstanceCount=4,
            ThreadsPerCore=2,
            VolumeSizeInGB=2000,
            KubernetesConfig={"Labels": {"workload": "ray-train"}},
            OverrideVpcConfig={
                "SecurityGroupIds": [
                    {
                        "Fn::ImportValue": "HprayProdNetwork:ExportsOutputFnGetAttNetworkSharedSecurityGroup"
                        "90AC47FCGroupId9DACA52C"
                    }
                ],
                "Subnets": [
                    {
                        "Fn::ImportValue": "HprayProdNetwork:ExportsOutputRefNetworkHyperPodSubnetUse1az4Subnet"
                        "3C20CC4488EF76EB"
                    }
                ],
            },
        ),
        _group(
            "prod",
            "333333333333",
            InstanceGroupName="serve-g6e",
            InstanceType="ml.g6e.12xlarge",
            InstanceCount=2,
            ThreadsPerCore=1,
            VolumeSizeInGB=1000,
            KubernetesConfig={
                "Labels": {"workload": "ray-serve"},
                "Taints": [{"Effect": "NoSchedule", "Key": "workload", "Value": "ray-serve"}],
            },
        ),
        _cpu_group(
            "prod",
            "333333333333",
            InstanceGroupName="data-cpu",
            InstanceType="ml.m7i.8xlarge",
            InstanceCount=2,
            ThreadsPerCore=2,
            VolumeSizeInGB=500,
            KubernetesConfig={"Labels": {"workload": "ray-data"}},
            OverrideVpcConfig={
                "SecurityGroupIds": [
                    {
                        "Fn::ImportValue": "HprayProdNetwork:ExportsOutputFnGetAttNetworkSharedSecurityGroup"
                        "90AC47FCGroupId9DACA52C"
                    }
                ],
                "Subnets": [
                    {
                        "Fn::ImportValue": "HprayProdNetwork:ExportsOutputRefNetworkHyperPodSubnetUse1az4Subnet"
                        "3C20CC4488EF76EB"
                    }
                ],
            },
        ),
    ],
}


def test_one_instance_group_per_config_entry(env):
    config, _, _, template = env
    assert cluster_props(template)["InstanceGroups"] == GOLDEN_GROUPS[config.name]


def test_gpu_groups_get_deep_health_checks_by_default(env):
    config, _, _, template = env
    for group, rendered in zip(config.hyperpod.instance_groups, cluster_props(template)["InstanceGroups"], strict=True):
        if group.is_gpu and group.deep_health_checks is None:
            assert "InstanceStress" in rendered["OnStartDeepHealthChecks"]


def test_prod_synthesizes_two_gpu_groups(synthesized):
    assembly, _config, stacks = synthesized("prod")
    groups = cluster_props(assembly.get_stack_by_name(stacks.hyperpod.stack_name).template)["InstanceGroups"]
    # And the CPU group of the pretokenize job.
    assert [(g["InstanceGroupName"], g["InstanceType"]) for g in groups] == [
        ("train-p5", "ml.p5.48xlarge"),
        ("serve-g6e", "ml.g6e.12xlarge"),
        ("data-cpu", "ml.m7i.8xlarge"),
    ]
    assert groups[0]["OverrideVpcConfig"]["Subnets"] == [
        stacks.hyperpod.resolve(stacks.network.network.hyperpod_subnets["use1-az4"].subnet_id)
    ]
    assert groups[1]["KubernetesConfig"]["Taints"] == [
        {"Key": "workload", "Value": "ray-serve", "Effect": "NoSchedule"}
    ]


def test_cluster_waits_for_scripts_and_role_policy(env):
    _, _, _, template = env
    (cluster,) = resources(template, "AWS::SageMaker::Cluster").values()
    (upload,) = resources(template, "Custom::CDKBucketDeployment")
    (policy,) = [
        k
        for k, r in resources(template, "AWS::IAM::Policy").items()
        if r["Properties"]["Roles"] == [{"Ref": ROLE_LOGICAL_ID}]
    ]
    assert set(cluster["DependsOn"]) == {upload, policy}


def test_outputs(env):
    config, _, _, template = env
    outputs = template["Outputs"]
    assert outputs["ClusterName"]["Value"] == config.hyperpod_cluster_name
    assert outputs["ClusterArn"]["Value"] == {"Fn::GetAtt": [CLUSTER_LOGICAL_ID, "ClusterArn"]}


# Execution role ------------------------------------------------------------------------------


def test_role_trusts_sagemaker_only(env):
    _, _, _, template = env
    role = template["Resources"][ROLE_LOGICAL_ID]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}}
    ]
    assert role["ManagedPolicyArns"] == [
        {
            "Fn::Join": [
                "",
                ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy"],
            ]
        }
    ]


def test_role_statements_are_scoped(env):
    config, stacks, stack, template = env
    s = statements(template)
    region, account = config.region, config.account
    subnet_arns = [
        {
            "Fn::Join": [
                "",
                [
                    f"arn:aws:ec2:{region}:{account}:subnet/",
                    stack.resolve(stacks.network.network.hyperpod_subnets[h.az_id].subnet_id),
                ],
            ]
        }
        for h in config.network.hyperpod_subnets
    ]
    eni = f"arn:aws:ec2:{region}:{account}:network-interface/*"
    assert sorted(s["CreateEnisInHyperPodSubnets"]["Resource"], key=json.dumps) == sorted(
        [
            eni,
            *subnet_arns,
            {
                "Fn::Join": [
                    "",
                    [
                        f"arn:aws:ec2:{region}:{account}:security-group/",
                        stack.resolve(stacks.network.network.security_group.security_group_id),
                    ],
                ]
            },
        ],
        key=json.dumps,
    )
    manage = s["ManageEnisInHyperPodSubnets"]
    assert manage["Action"] == sorted(ENI_ACTIONS) and manage["Resource"] == eni
    assert manage["Condition"] == {"ArnEquals": {"ec2:Subnet": subnet_arns}}
    assert s["TagNewEnis"]["Condition"] == {"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}}
    assert s["DescribeNetwork"]["Action"] == sorted(EC2_DESCRIBE_ACTIONS) and s["DescribeNetwork"]["Resource"] == "*"
    assert s["EcrToken"] == {
        "Sid": "EcrToken",
        "Action": "ecr:GetAuthorizationToken",
        "Effect": "Allow",
        "Resource": "*",
    }
    assert s["EcrPullInRegion"]["Action"] == sorted(ECR_PULL_ACTIONS)
    assert s["EcrPullInRegion"]["Resource"] == f"arn:aws:ecr:{region}:*:repository/*"
    assert s["PodIdentityOnThisCluster"]["Resource"] == stack.resolve(stack.hyperpod.eks_cluster.cluster_arn)
    bucket = config.bucket_names()["lifecycle_scripts"]
    prefix = f"lifecycle-scripts/{content_hash()}/"
    assert s["ReadLifecycleScripts"]["Action"] == "s3:GetObject"
    assert s["ReadLifecycleScripts"]["Resource"] == f"arn:aws:s3:::{bucket}/{prefix}*"
    assert s["ListLifecycleScripts"]["Resource"] == f"arn:aws:s3:::{bucket}"
    assert s["ListLifecycleScripts"]["Condition"] == {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}}
    assert s["kms:Decrypt"]["Resource"] == stack.resolve(stacks.storage.platform_key.key_arn)
    # ENI actions that also authorize the node's instance and security groups (IAM's action table).
    nodes = s["EniActionsOnNodesAndGroups"]
    assert nodes["Action"] == sorted(ENI_NODE_ACTIONS) and "Condition" not in nodes
    assert sorted(nodes["Resource"], key=json.dumps) == sorted(
        [
            f"arn:aws:ec2:{region}:*:instance/*",
            {
                "Fn::Join": [
                    "",
                    [
                        f"arn:aws:ec2:{region}:{account}:security-group/",
                        stack.resolve(stacks.network.network.security_group.security_group_id),
                    ],
                ]
            },
        ],
        key=json.dumps,
    )
    # Encrypted node EBS volumes: grants for AWS resources only (HyperPod customer-managed-key page).
    key = stack.resolve(stacks.storage.platform_key.key_arn)
    assert s["EbsVolumeKeyGrants"]["Action"] == "kms:CreateGrant" and s["EbsVolumeKeyGrants"]["Resource"] == key
    assert s["EbsVolumeKeyGrants"]["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    assert s["EbsVolumeKeyDescribe"]["Action"] == "kms:DescribeKey"


def test_eni_node_actions_are_those_iam_says_touch_instances_or_groups():
    from review.policy import resource_types

    touching = {
        a
        for a in ("ec2:CreateNetworkInterface", *ENI_ACTIONS)
        if {"instance"} & set(resource_types(a))
        or ("security-group" in resource_types(a) and a != "ec2:CreateNetworkInterface")
    }
    assert touching == set(ENI_NODE_ACTIONS)


def test_role_has_no_service_wide_or_full_access(env):
    _, _, _, template = env
    for statement in statements(template).values():
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        assert all(not a.endswith(":*") and a != "*" for a in actions), statement
        if statement["Resource"] == "*":
            assert set(actions) <= set(EC2_DESCRIBE_ACTIONS) | {"ecr:GetAuthorizationToken"}, statement
    role = template["Resources"][ROLE_LOGICAL_ID]["Properties"]
    assert "FullAccess" not in json.dumps(role["ManagedPolicyArns"])


def test_lifecycle_bucket_name_matches_storage(env):
    config, stacks, _, _ = env
    storage = stacks.storage
    bucket = storage.resolve(storage.buckets.lifecycle_scripts.node.default_child.bucket_name)
    assert bucket == config.bucket_names()["lifecycle_scripts"]
    assert bucket.startswith("sagemaker-")


def test_upload_goes_to_the_hash_prefix_and_keeps_old_ones(env):
    config, _, _, template = env
    (upload,) = resources(template, "Custom::CDKBucketDeployment").values()
    props = upload["Properties"]
    assert props["DestinationBucketName"] == config.bucket_names()["lifecycle_scripts"]
    assert props["DestinationBucketKeyPrefix"] == f"lifecycle-scripts/{content_hash()}/"
    # False would delete the previous prefix while the cluster still points at it.
    assert props["RetainOnDelete"] is True


def test_docs_name_the_schemas_create_only_properties():
    # The docs' replacement note follows the AWS::SageMaker::Cluster schema that cfn-lint ships;
    # if a cfn-lint upgrade changes the create-only set, this fails and the note needs updating.
    from pathlib import Path

    import cfnlint

    base = Path(cfnlint.__file__).parent / "data" / "schemas" / "providers"
    schema_id = json.loads((base / "us-east-1.json").read_text())["AWS::SageMaker::Cluster"]
    schema = json.loads((base.parent / "resources" / f"{schema_id}.json").read_text())
    assert schema["createOnlyProperties"] == [
        "/properties/ClusterName",
        "/properties/VpcConfig",
        "/properties/Orchestrator/Eks",
    ]
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    note = page.split("### The HyperPod cluster", 1)[1].split("\n## ", 1)[0]
    for name in ("`ClusterName`", "`VpcConfig`", "`Orchestrator.Eks.ClusterArn`"):
        assert name in note
