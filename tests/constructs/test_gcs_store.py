"""constructs/gcs_store.py: the RayServices' GCS store per environment's settings, its token
kept out of the template, its network reach, and stable logical IDs of the stateful parts."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match

from config import load_environment, versions
from config.facts.names import GCS_STORE_PORT, GCS_STORE_SERVICE, WORKLOADS_NAMESPACE, gcs_store_secret_name
from constructs.eks_cluster import PlatformEksCluster
from constructs.gcs_store import GcsStore
from manifests import ha
from tests.conftest import template_of

ENVS = ("dev", "staging", "prod")


def synth(env_name: str, **settings):
    cfg = load_environment(env_name)
    gcs = cfg.inference.gcs_fault_tolerance.model_copy(update=settings)
    stack = Stack(App(), "T", env={"account": cfg.account, "region": cfg.region})
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    key = kms.Key(stack, "Key")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    shared = ec2.SecurityGroup(stack, "Shared", vpc=vpc)
    file_system = fsx.LustreFileSystem.from_lustre_file_system_attributes(
        stack, "Fsx", file_system_id="fs-0123456789abcdef0", dns_name="fsx.local", security_group=shared
    )
    cluster = PlatformEksCluster(
        stack,
        "Eks",
        eks_config=cfg.eks,
        cluster_name="c",
        vpc=vpc,
        security_group=shared,
        secrets_key=key,
        file_system=file_system,
    )
    heads = ec2.SecurityGroup(stack, "Heads", vpc=vpc)
    store = GcsStore(
        stack,
        "GcsStore",
        name_prefix=cfg.name_prefix,
        gcs_config=gcs,
        vpc=vpc,
        client_security_group=heads,
        key=key,
        readers=[role],
        cluster=cluster,
    )
    return cfg, gcs, store, template_of(stack)


@pytest.mark.parametrize("env", ENVS)
def test_valkey_encrypted_in_private_subnets_per_environment(env):
    _, gcs, _, t = synth(env)
    failover = gcs.replicas >= 1
    t.has_resource_properties(
        "AWS::ElastiCache::ReplicationGroup",
        {
            "Engine": "valkey",
            "EngineVersion": versions.GCS_STORE_ENGINE_VERSION,
            "CacheNodeType": gcs.node_type,
            "ClusterMode": "disabled",
            "NumCacheClusters": 1 + gcs.replicas,
            "AutomaticFailoverEnabled": failover,
            "MultiAZEnabled": failover,
            "Port": GCS_STORE_PORT,
            "AtRestEncryptionEnabled": True,
            "KmsKeyId": {"Fn::GetAtt": [Match.string_like_regexp("^Key"), "Arn"]},
            "TransitEncryptionEnabled": True,
            "TransitEncryptionMode": "required",
            "SnapshotRetentionLimit": gcs.snapshot_retention_days,
        },
    )
    # The private subnets only.
    (group,) = t.find_resources("AWS::ElastiCache::SubnetGroup").values()
    subnet_ids = {s["Ref"] for s in group["Properties"]["SubnetIds"]}
    assert subnet_ids and all("PrivateSubnet" in s for s in subnet_ids)
    # Deleted with the stack in every environment, production included (issue 41: a retained store
    # kept the VPC from being deleted and kept billing; it caches nothing worth keeping).
    policy = "Delete"
    for kind in (
        "AWS::ElastiCache::ReplicationGroup",
        "AWS::SecretsManager::Secret",
        "AWS::ElastiCache::SubnetGroup",
        "AWS::EC2::SecurityGroup",
    ):
        for logical_id, res in t.find_resources(kind).items():
            if kind == "AWS::EC2::SecurityGroup" and not logical_id.startswith("GcsStore"):
                continue
            assert res["DeletionPolicy"] == policy, kind


def test_the_auth_token_is_a_dynamic_reference_never_a_value():
    _, _, _, t = synth("prod")
    (rg,) = t.find_resources("AWS::ElastiCache::ReplicationGroup").values()
    (secret_id,) = t.find_resources("AWS::SecretsManager::Secret")
    token = json.dumps(rg["Properties"]["AuthToken"])
    assert "{{resolve:secretsmanager:" in token and secret_id in token
    t.has_resource_properties(
        "AWS::SecretsManager::Secret",
        {
            "Name": gcs_store_secret_name("hpray-prod"),
            "KmsKeyId": Match.any_value(),
            "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True, "IncludeSpace": False},
        },
    )
    for res in t.find_resources("AWS::SecretsManager::Secret").values():
        assert "SecretString" not in res["Properties"]


def test_only_the_heads_reach_it_on_its_tls_port_and_it_opens_nothing():
    _, _, store, t = synth("dev")
    groups = t.find_resources("AWS::EC2::SecurityGroup")
    own = next(lid for lid in groups if lid.startswith("GcsStoreSecurityGroup"))
    assert "SecurityGroupIngress" not in groups[own]["Properties"]
    # allow_all_outbound=False: CDK's placeholder egress rule that matches no traffic.
    assert groups[own]["Properties"]["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]
    heads = next(lid for lid in groups if lid.startswith("Heads"))
    ingress = t.find_resources("AWS::EC2::SecurityGroupIngress")
    into_store = [r["Properties"] for r in ingress.values() if r["Properties"]["GroupId"]["Fn::GetAtt"][0] == own]
    assert into_store == [
        {
            "GroupId": {"Fn::GetAtt": [own, "GroupId"]},
            "SourceSecurityGroupId": {"Fn::GetAtt": [heads, "GroupId"]},
            "IpProtocol": "tcp",
            "FromPort": GCS_STORE_PORT,
            "ToPort": GCS_STORE_PORT,
            "Description": "Ray head pods (GCS) and KubeRay's Redis cleanup job (their own group)",
        }
    ]
    assert store.port == GCS_STORE_PORT


def test_the_reader_reads_and_decrypts_only_through_secrets_manager():
    _, _, _, t = synth("dev")
    # The reader's policy (the cluster's own roles have theirs).
    statements = [
        s
        for lid, p in t.find_resources("AWS::IAM::Policy").items()
        if lid.startswith("RoleDefaultPolicy")
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    (secret_id,) = t.find_resources("AWS::SecretsManager::Secret")
    read, decrypt = statements
    assert (read["Sid"], decrypt["Sid"]) == ("ReadGcsStoreToken", "DecryptGcsStoreToken")
    assert read["Resource"] == {"Ref": secret_id}
    assert decrypt["Condition"] == {
        "StringEquals": {
            "kms:ViaService": "secretsmanager.us-east-1.amazonaws.com",
            "kms:EncryptionContext:SecretARN": {"Ref": secret_id},
        }
    }


def test_the_service_the_manifests_name_points_at_the_primary_endpoint():
    _, _, _, t = synth("dev")
    (manifest,) = [
        r for lid, r in t.find_resources("Custom::AWSCDK-EKS-KubernetesResource").items() if lid.startswith("GcsStore")
    ]
    body = json.dumps(manifest["Properties"]["Manifest"])
    assert f'\\"name\\":\\"{GCS_STORE_SERVICE}\\"' in body and f'\\"namespace\\":\\"{WORKLOADS_NAMESPACE}\\"' in body
    assert "PrimaryEndPoint.Address" in body and "ExternalName" in body
    assert (
        ha.redis_address() == f"rediss://{GCS_STORE_SERVICE}.{WORKLOADS_NAMESPACE}.svc.cluster.local:{GCS_STORE_PORT}"
    )


def test_a_non_production_store_without_replicas_acknowledges_why():
    _, _, _, t = synth("dev", replicas=0, snapshot_retention_days=0)
    t.has_resource_properties(
        "AWS::ElastiCache::ReplicationGroup",
        {
            "NumCacheClusters": 1,
            "AutomaticFailoverEnabled": False,
            "MultiAZEnabled": False,
            "SnapshotRetentionLimit": 0,
        },
    )
