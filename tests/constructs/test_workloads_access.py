"""Workloads namespace, service account with Pod Identity, FSx StorageClass/PV/PVC."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from constructs import workloads_access as wa

from config import versions
from config.facts.jobs import JOBS_PREFIX
from config.facts.names import FSX_PVC, WORKLOADS_NAMESPACE, WORKLOADS_SERVICE_ACCOUNT
from tests.conftest import template_of

# The schema of the Kubernetes version the environments run (config/versions.py).
K8S_SCHEMA_VERSION = versions.newest_kubernetes_version()


def cfn_id(stack, construct) -> str:
    """Logical ID of the CloudFormation resource under an L2/L3 construct."""
    while construct.node.default_child is not None:
        construct = construct.node.default_child
    return stack.get_logical_id(construct)


def sample_fsx():
    return wa.fsx_manifests(
        file_system_id="fs-0123456789abcdef0",
        dns_name="fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        mount_name="abcdefgh",
        storage_capacity_gib=1200,
    )


def test_manifests_validate_against_kubernetes_schemas():
    for manifest in [wa.workloads_namespace_manifest(), wa.workloads_service_account_manifest(), *sample_fsx()]:
        kubernetes_validate.validate(manifest, K8S_SCHEMA_VERSION, strict=True)


def test_static_volume_and_rwx_claim():
    storage_class, volume, claim = sample_fsx()
    assert storage_class["provisioner"] == "fsx.csi.aws.com" and storage_class["reclaimPolicy"] == "Retain"
    spec = volume["spec"]
    assert spec["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
        "volumeAttributes": {"dnsname": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "mountname": "abcdefgh"},
    }
    assert spec["accessModes"] == ["ReadWriteMany"] and spec["capacity"] == {"storage": "1200Gi"}
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["claimRef"] == {"namespace": "ray-workloads", "name": "fsx-claim"}
    assert claim["metadata"] == {
        "name": FSX_PVC,
        "namespace": WORKLOADS_NAMESPACE,
        "labels": claim["metadata"]["labels"],
    }
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert claim["spec"]["storageClassName"] == storage_class["metadata"]["name"] == spec["storageClassName"]


def test_names_match_the_workloads_contract():
    assert (WORKLOADS_NAMESPACE, WORKLOADS_SERVICE_ACCOUNT, FSX_PVC) == ("ray-workloads", "ray-workloads", "fsx-claim")
    from manifests import k8s as workloads_k8s  # the manifests' own constants

    assert workloads_k8s.NAMESPACE == WORKLOADS_NAMESPACE
    assert workloads_k8s.SERVICE_ACCOUNT == WORKLOADS_SERVICE_ACCOUNT
    assert workloads_k8s.FSX_PVC == FSX_PVC


@pytest.fixture(scope="module")
def dev(synthesized):
    _, config, stacks = synthesized("dev")
    return config, stacks, template_of(stacks.cluster).to_json()["Resources"]


def test_template_fsx_volume_uses_the_storage_stack_file_system(dev):
    _config, stacks, res = dev
    cluster = stacks.cluster
    fsx = res[cfn_id(cluster, cluster.workloads.fsx)]
    manifest = json.dumps(fsx["Properties"]["Manifest"])
    assert "Fn::ImportValue" in manifest  # id, DNS name and mount name from the storage stack
    assert "fsx-claim" in manifest and "ReadWriteMany" in manifest
    fsx_addon = cluster.get_logical_id(cluster.eks.addons["aws-fsx-csi-driver"])
    assert fsx_addon in fsx["DependsOn"]
    assert cfn_id(cluster, cluster.workloads.namespace) in fsx["DependsOn"]


def test_pod_identity_association(dev):
    _, stacks, res = dev
    cluster = stacks.cluster
    assoc = res[cluster.get_logical_id(cluster.workloads.pod_identity)]["Properties"]
    assert assoc["Namespace"] == "ray-workloads" and assoc["ServiceAccount"] == "ray-workloads"
    role_id = cluster.get_logical_id(cluster.workloads.role.node.default_child)
    assert assoc["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    trust = res[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
        }
    ]


def test_role_reaches_only_the_checkpoint_prefix_and_key(dev):
    config, stacks, res = dev
    cluster = stacks.cluster
    role_id = cluster.get_logical_id(cluster.workloads.role.node.default_child)
    statements = next(
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in res.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
    )
    by_sid = {s["Sid"]: s for s in statements}
    bucket = config.bucket_names()["checkpoints"]
    prefix = config.fsx.import_export_prefix
    bucket_arn = f"arn:aws:s3:::{bucket}"
    assert by_sid["ListCheckpointPrefix"]["Resource"] == bucket_arn
    assert by_sid["ListCheckpointPrefix"]["Condition"] == {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}}
    assert by_sid["ReadWriteCheckpoints"]["Resource"] == f"arn:aws:s3:::{bucket}/{prefix}*"
    assert "s3:*" not in json.dumps(statements) and '"*"' not in json.dumps([s["Resource"] for s in statements])
    key = by_sid["CheckpointKey"]
    assert sorted(key["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert "Fn::ImportValue" in json.dumps(key["Resource"])
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}
    # The code of `hpray submit job` (config/facts/jobs.py): read-only, its own prefix.
    assert prefix != JOBS_PREFIX and not JOBS_PREFIX.startswith(prefix)
    assert by_sid["ListJobsPrefix"]["Condition"] == {"StringLike": {"s3:prefix": [JOBS_PREFIX, f"{JOBS_PREFIX}*"]}}
    assert by_sid["ReadJobsPrefix"] == {
        "Sid": "ReadJobsPrefix",
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{bucket}/{JOBS_PREFIX}*",
    }
    # The Ray auth token (constructs/ray_auth.py, tests/constructs/test_ray_auth.py pins them) and,
    # with GCS fault tolerance, the store's AUTH token (constructs/gcs_store.py, its own tests).
    assert config.gcs_fault_tolerance
    assert set(by_sid) == {
        "ReadGcsStoreToken",
        "DecryptGcsStoreToken",
        "ListCheckpointPrefix",
        "ReadWriteCheckpoints",
        "ListJobsPrefix",
        "ReadJobsPrefix",
        "CheckpointKey",
        "ReadRayAuthToken",
        "DecryptRayAuthToken",
    }


def test_service_account_after_namespace_after_pod_identity_agent(dev):
    _, stacks, res = dev
    cluster = stacks.cluster

    def lid(construct):
        while construct.node.default_child is not None:
            construct = construct.node.default_child
        return cluster.get_logical_id(construct)

    ns, sa = cluster.workloads.namespace, cluster.workloads.service_account
    assert lid(ns) in res[lid(sa)]["DependsOn"]
    assert cluster.get_logical_id(cluster.eks.addons["eks-pod-identity-agent"]) in res[lid(ns)]["DependsOn"]
    assert json.loads(res[lid(sa)]["Properties"]["Manifest"])[0]["metadata"]["name"] == "ray-workloads"
