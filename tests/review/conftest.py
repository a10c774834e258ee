"""Synthetic cloud assemblies for the review tests: a manifest, templates and metadata files
written the way CDK writes them, for resource types not yet built on main (EKS, HyperPod,
launch templates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def write_assembly(
    directory: Path,
    stacks: dict[str, dict],
    *,
    metadata: dict[str, dict] | None = None,
    env: str = "aws://111111111111/us-east-1",
    tags: dict[str, str] | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    artifacts = {}
    for name, template in stacks.items():
        (directory / f"{name}.template.json").write_text(json.dumps(template, indent=1))
        art = {
            "type": "aws:cloudformation:stack",
            "environment": env,
            "properties": {"templateFile": f"{name}.template.json", "tags": tags or {"Environment": "test"}},
            "displayName": name,
        }
        if metadata and name in metadata:
            (directory / f"{name}.metadata.json").write_text(json.dumps(metadata[name]))
            art["additionalMetadataFile"] = f"{name}.metadata.json"
        artifacts[name] = art
    (directory / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": artifacts}))
    return directory


def cluster_template(
    *, g5_count: int = 2, nat_gateways: int = 2, bucket_name: str = "ckpt-bucket", extra: dict | None = None
) -> dict:
    """VPC, subnets, EKS with a node group and a Helm release, a HyperPod cluster with two
    instance groups, FSx, a bucket, a KMS key, an interface endpoint."""
    res: dict = {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
        "PrivateA": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.0.0/20", "AvailabilityZoneId": "use1-az4"},
        },
        "PrivateB": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.16.0/20", "AvailabilityZoneId": "use1-az6"},
        },
        "HyperPodSubnet": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.1.0.0/17", "AvailabilityZoneId": "use1-az4"},
        },
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"EnableKeyRotation": True}},
        "Sg": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {"GroupDescription": "shared", "VpcId": {"Ref": "Vpc"}},
        },
        "Eks": {
            "Type": "AWS::EKS::Cluster",
            "Properties": {
                "Name": "demo-eks",
                "Version": "1.33",
                "RoleArn": "arn:aws:iam::111111111111:role/eks",
                "ResourcesVpcConfig": {
                    "SubnetIds": [{"Ref": "PrivateA"}, {"Ref": "PrivateB"}],
                    "EndpointPublicAccess": True,
                    "PublicAccessCidrs": ["203.0.113.0/24"],
                    "SecurityGroupIds": [{"Ref": "Sg"}],
                },
                "EncryptionConfig": [
                    {"Resources": ["secrets"], "Provider": {"KeyArn": {"Fn::GetAtt": ["Key", "Arn"]}}}
                ],
            },
        },
        "SystemNodes": {
            "Type": "AWS::EKS::Nodegroup",
            "Properties": {
                "ClusterName": {"Ref": "Eks"},
                "NodegroupName": "system",
                "InstanceTypes": ["m7i.xlarge"],
                "DiskSize": 100,
                "ScalingConfig": {"DesiredSize": 2, "MinSize": 2, "MaxSize": 3},
                "NodeRole": "arn:aws:iam::111111111111:role/node",
                "Subnets": [{"Ref": "PrivateA"}, {"Ref": "PrivateB"}],
            },
        },
        "KubeRay": {
            "Type": "Custom::AWSCDK-EKS-HelmChart",
            "Properties": {
                "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:x",
                "ClusterName": {"Ref": "Eks"},
                "Release": "kuberay-operator",
                "Chart": "kuberay-operator",
                "Version": "1.7.0",
                "Namespace": "kuberay",
            },
        },
        "HyperPod": {
            "Type": "AWS::SageMaker::Cluster",
            "Properties": {
                "ClusterName": "demo-hyperpod",
                "Orchestrator": {"Eks": {"ClusterArn": {"Fn::GetAtt": ["Eks", "Arn"]}}},
                "VpcConfig": {"Subnets": [{"Ref": "HyperPodSubnet"}], "SecurityGroupIds": [{"Ref": "Sg"}]},
                "InstanceGroups": [
                    {
                        "InstanceGroupName": "gpu-workers",
                        "InstanceType": "ml.g5.12xlarge",
                        "InstanceCount": g5_count,
                        "ExecutionRole": "arn:aws:iam::111111111111:role/hp",
                        "LifeCycleConfig": {"SourceS3Uri": "s3://x/", "OnCreate": "on_create.sh"},
                        "InstanceStorageConfigs": [
                            {"EbsVolumeConfig": {"VolumeSizeInGB": 500, "VolumeKmsKeyId": {"Ref": "Key"}}}
                        ],
                    },
                    {
                        "InstanceGroupName": "train-p5",
                        "InstanceType": "ml.p5.48xlarge",
                        "InstanceCount": 1,
                        "ExecutionRole": "arn:aws:iam::111111111111:role/hp",
                        "LifeCycleConfig": {"SourceS3Uri": "s3://x/", "OnCreate": "on_create.sh"},
                    },
                ],
            },
        },
        "Lustre": {
            "Type": "AWS::FSx::FileSystem",
            "Properties": {
                "FileSystemType": "LUSTRE",
                "StorageCapacity": 2400,
                "SubnetIds": [{"Ref": "HyperPodSubnet"}],
                "SecurityGroupIds": [{"Ref": "Sg"}],
                "KmsKeyId": {"Ref": "Key"},
                "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
            },
        },
        "Checkpoints": {
            "Type": "AWS::S3::Bucket",
            "DeletionPolicy": "Retain",
            "Properties": {
                "BucketName": bucket_name,
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [
                        {
                            "ServerSideEncryptionByDefault": {
                                "SSEAlgorithm": "aws:kms",
                                "KMSMasterKeyID": {"Fn::GetAtt": ["Key", "Arn"]},
                            }
                        }
                    ]
                },
                "PublicAccessBlockConfiguration": {
                    "BlockPublicAcls": True,
                    "BlockPublicPolicy": True,
                    "IgnorePublicAcls": True,
                    "RestrictPublicBuckets": True,
                },
            },
        },
        "StsEndpoint": {
            "Type": "AWS::EC2::VPCEndpoint",
            "Properties": {
                "VpcId": {"Ref": "Vpc"},
                "VpcEndpointType": "Interface",
                "ServiceName": "com.amazonaws.us-east-1.sts",
                "SubnetIds": [{"Ref": "PrivateA"}, {"Ref": "PrivateB"}],
            },
        },
        "NodeTemplate": {
            "Type": "AWS::EC2::LaunchTemplate",
            "Properties": {
                "LaunchTemplateData": {
                    "BlockDeviceMappings": [
                        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 100, "VolumeType": "gp3"}}
                    ]
                }
            },
        },
    }
    for i in range(nat_gateways):
        res[f"Nat{i}"] = {
            "Type": "AWS::EC2::NatGateway",
            "Properties": {"SubnetId": {"Ref": "PrivateA"}, "AllocationId": "eipalloc-1"},
        }
    res.update(extra or {})
    return {"Resources": res}


@pytest.fixture
def assembly_dir(tmp_path):
    def make(name: str, stacks: dict[str, dict], **kwargs) -> Path:
        return write_assembly(tmp_path / name, stacks, **kwargs)

    return make


PRICES_YAML = """
recorded: "2000-01-01"
region: us-east-1
currency: USD
hours_per_month: 730
hyperpod_instance_hourly: {source: test, prices: {ml.g5.12xlarge: 10.0, ml.p5.48xlarge: 50.0}}
hyperpod_ebs_gb_month: {source: test, price: 0.1}
ec2_instance_hourly: {source: test, prices: {m7i.xlarge: 0.2}}
ebs_gb_month: {source: test, prices: {gp3: 0.08}}
eks_cluster_hourly: {source: test, price: 0.1}
eks_cluster_extended_hourly: {source: test, price: 0.6}
nat_gateway_hourly: {source: test, price: 0.05}
vpc_interface_endpoint_hourly_per_az: {source: test, price: 0.01}
fsx_lustre_gb_month: {source: test, prices: {PERSISTENT_2: {125: 0.145, 250: 0.2}}}
kms_key_month: {source: test, price: 1.0}
"""


@pytest.fixture
def test_prices(tmp_path):
    from config.prices import load_prices

    path = tmp_path / "prices.yaml"
    path.write_text(PRICES_YAML)
    return load_prices(path)


@pytest.fixture
def cluster_tpl():
    return cluster_template
