"""The GCS store's flows (constructs/network_flows.py gcs_store_flows, the token's access flows), proven
against a synthesized environment that has GCS fault tolerance (prod with the Secrets Store CSI
driver on), and found broken when the rule they need is gone."""

from __future__ import annotations

import json

import pytest

from constructs.flow_table import flow_table
from review.assembly import load_assembly
from review.flows import check_flows

GCS_FLOWS = ("head->gcs-store", "workloads-gcs-store-secret", "workloads-gcs-store-key")


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    import aws_cdk as cdk

    from app import APP_PROPS, build_app
    from config import load_environment
    from tests.conftest import cdk_context

    cfg = load_environment("prod")
    cfg = cfg.model_copy(update={"eks": cfg.eks.model_copy(update={"ray_token_auth": True})})
    assert cfg.gcs_fault_tolerance
    out = tmp_path_factory.mktemp("cdk-prod-gcs")
    props = {k: v for k, v in APP_PROPS.items() if k != "context"}
    app = cdk.App(context={**APP_PROPS["context"], **cdk_context(), "env": "prod"}, outdir=str(out), **props)
    build_app(app, cfg)
    return app.synth(), cfg


def test_every_flow_is_allowed_with_the_gcs_store(assembly):
    asm, cfg = assembly
    results = {r.name: r for r in check_flows(load_assembly(asm.directory).stacks, cfg)}
    assert set(GCS_FLOWS) <= set(results)
    bad = [f"{n}: {r.detail}" for n, r in results.items() if not r.ok]
    assert not bad, "\n".join(bad)
    assert "FromRayHeads" in results["head->gcs-store"].detail


def test_the_store_without_its_ingress_rule_is_a_broken_flow(assembly):
    asm, cfg = assembly
    stacks = load_assembly(asm.directory).stacks
    dropped = 0
    for stack in stacks:
        res = stack.template.get("Resources") or {}
        for lid in [
            lid for lid, r in res.items() if r["Type"] == "AWS::EC2::SecurityGroupIngress" and "GcsStore" in lid
        ]:
            del res[lid]
            dropped += 1
    assert dropped == 1
    r = {x.name: x for x in check_flows(stacks, cfg)}["head->gcs-store"]
    assert not r.ok and "no ingress rule" in r.detail


def test_no_other_pod_of_the_system_nodes_reaches_the_store(assembly):
    """The store admits the heads' own group (security groups for pods), not the system nodes'
    group that the operator, CoreDNS and the control plane's interfaces share."""
    asm, cfg = assembly
    results = {r.name: r for r in check_flows(load_assembly(asm.directory).stacks, cfg)}
    denied = [r for r in results.values() if r.kind == "denied"]
    assert {r.name for r in denied} == {
        "kuberay-operator-x->gcs-store",
        "coredns-x->gcs-store",
        "eks-api-x->gcs-store",
        "ray-workers-x->gcs-store",
    }
    assert all(r.ok for r in denied), [(r.name, r.detail) for r in denied if not r.ok]
    head = results["head->gcs-store"]
    assert head.ok and "RayHeadsSecurityGroup" in head.detail and "GcsStoreFromRayHeads" in head.detail


def test_the_store_admitting_the_system_nodes_group_is_a_broken_denied_flow(assembly):
    """The store as it was: its ingress rule names the EKS cluster security group, so every pod
    of the system nodes reaches it."""
    asm, cfg = assembly
    stacks = load_assembly(asm.directory).stacks
    (cluster_stack,) = [
        s for s in stacks if "AWS::EKS::Cluster" in {r["Type"] for r in s.template["Resources"].values()}
    ]
    res = cluster_stack.template["Resources"]
    (cluster_lid,) = [lid for lid, r in res.items() if r["Type"] == "AWS::EKS::Cluster"]
    (rule,) = [r for lid, r in res.items() if r["Type"] == "AWS::EC2::SecurityGroupIngress" and "GcsStore" in lid]
    rule["Properties"]["SourceSecurityGroupId"] = {"Fn::GetAtt": [cluster_lid, "ClusterSecurityGroupId"]}
    r = {x.name: x for x in check_flows(stacks, cfg)}
    for name in ("kuberay-operator-x->gcs-store", "coredns-x->gcs-store", "eks-api-x->gcs-store"):
        assert not r[name].ok and "GcsStoreFromRayHeads" in r[name].detail, (name, r[name].detail)
    assert r["ray-workers-x->gcs-store"].ok
    assert not r["head->gcs-store"].ok
    from review.flows import broken_lines

    assert any(
        "kuberay-operator-x->gcs-store" in line and "is allowed but must not be" in line
        for line in broken_lines("prod", list(r.values()))
    )


def test_without_the_security_group_policy_the_heads_are_not_found(assembly):
    """The heads' group reaches them only through the SecurityGroupPolicy; without it every head
    flow is broken, naming the missing part."""
    asm, cfg = assembly
    stacks = load_assembly(asm.directory).stacks
    dropped = 0
    for stack in stacks:
        res = stack.template["Resources"]
        for lid in [lid for lid in res if lid.startswith("RayHeadsSecurityGroupPolicy")]:
            del res[lid]
            dropped += 1
    assert dropped == 1
    r = {x.name: x for x in check_flows(stacks, cfg)}
    assert not r["head->gcs-store"].ok and r["head->gcs-store"].detail == "ray-head: not found in the templates"
    assert not r["worker->head:6379"].ok


def test_a_reader_without_the_key_cannot_read_the_store_token(assembly):
    asm, cfg = assembly
    stacks = load_assembly(asm.directory).stacks
    for stack in stacks:
        for r in (stack.template.get("Resources") or {}).values():
            if r["Type"] == "AWS::IAM::Policy":
                doc = r["Properties"]["PolicyDocument"]
                doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != "DecryptGcsStoreToken"]
    r = {x.name: x for x in check_flows(stacks, cfg)}
    assert r["workloads-gcs-store-secret"].ok
    assert not r["workloads-gcs-store-key"].ok and "kms:Decrypt" in r["workloads-gcs-store-key"].detail


def test_no_gcs_flows_where_the_environment_has_none():
    from config import parse_environment
    from tests.config.config_data import env_data

    data = env_data("dev")
    data.setdefault("inference", {})["gcs_fault_tolerance"] = {"enabled": False}
    cfg = parse_environment(data, source="test")
    assert not cfg.gcs_fault_tolerance
    table = flow_table(cfg)
    names = {f.name for f in table.network} | {f.name for f in table.access}
    assert not names & set(GCS_FLOWS)


def test_the_store_keeps_its_logical_ids_and_is_deleted_with_the_stack(assembly):
    """Renaming the construct path replaces the replication group (a new endpoint, the GCS state gone).
    Deleted with the stack, production too (issue 41): it caches the live clusters' metadata, and
    retained it kept the VPC from being deleted and kept billing."""
    asm, _ = assembly
    (cluster,) = [s for s in asm.stacks if s.stack_name.endswith("Cluster")]
    res = cluster.template["Resources"]
    for lid, kind in (
        ("GcsStoreReplicationGroup70E1EA74", "AWS::ElastiCache::ReplicationGroup"),
        ("GcsStoreAuthTokenD8CABA1C", "AWS::SecretsManager::Secret"),
        ("GcsStoreSubnetGroup74C9949E", "AWS::ElastiCache::SubnetGroup"),
    ):
        assert lid in res, (lid, sorted(k for k in res if k.startswith("GcsStore")))
        assert res[lid]["Type"] == kind
        assert res[lid]["DeletionPolicy"] == "Delete" and res[lid]["UpdateReplacePolicy"] == "Delete"
    assert json.dumps(res).count("{{resolve:secretsmanager:") == 1
