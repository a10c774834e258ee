"""The Ray heads' own security group (security groups for pods) in the synthesized cluster stack:
the SecurityGroupPolicy that hands it to the head pods, and the store admitting it alone."""

from __future__ import annotations

import json

import pytest

from constructs.ray_heads import HEAD_NODE_TYPES, security_group_policy_manifest


def _cluster_template(synthesized, env: str) -> dict:
    assembly, _, _ = synthesized(env)
    (stack,) = [s for s in assembly.stacks if s.stack_name.endswith("Cluster")]
    return stack.template


def test_the_policy_selects_kuberays_heads_and_cleanup_job_in_the_ray_namespace():
    """KubeRay 1.7 labels head pods ray.io/node-type=head and the GCS store's cleanup Job, built
    from the head pod, redis-cleanup (raycluster_controller.go:1812 at v1.7.0): both reach the store."""
    m = security_group_policy_manifest("sg-0123")
    assert (m["apiVersion"], m["kind"]) == ("vpcresources.k8s.aws/v1beta1", "SecurityGroupPolicy")
    assert m["metadata"]["namespace"] == "ray-workloads"
    assert m["spec"] == {
        "podSelector": {
            "matchExpressions": [{"key": "ray.io/node-type", "operator": "In", "values": ["head", "redis-cleanup"]}]
        },
        "securityGroups": {"groupIds": ["sg-0123"]},
    }
    assert HEAD_NODE_TYPES == ("head", "redis-cleanup")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_policy_names_the_heads_group_and_the_store_admits_only_it(synthesized, env):
    res = _cluster_template(synthesized, env)["Resources"]
    (group,) = [lid for lid, r in res.items() if r["Type"] == "AWS::EC2::SecurityGroup" and lid.startswith("RayHeads")]
    (policy,) = [r for lid, r in res.items() if lid.startswith("RayHeadsSecurityGroupPolicy")]
    manifest = json.dumps(policy["Properties"]["Manifest"])
    assert "SecurityGroupPolicy" in manifest and group in manifest
    (store_rule,) = [
        r["Properties"] for lid, r in res.items() if r["Type"] == "AWS::EC2::SecurityGroupIngress" and "GcsStore" in lid
    ]
    assert store_rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [group, "GroupId"]}
    # The policy comes after the vpc-cni add-on (ENABLE_POD_ENI) and the Ray namespace.
    depends = policy.get("DependsOn", [])
    assert any(d.startswith("EksVpcCni") for d in depends), depends
    assert any(d.startswith("WorkloadsNamespace") for d in depends), depends


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_heads_group_opens_exactly_the_head_rows_of_the_flow_table(synthesized, env):
    """Ingress to the heads: the workers (every TCP port), the operator (dashboard), the kubelet
    (KubeRay's HTTP probe on the dashboard agent) and the collector (metrics); from the heads:
    the shared group (workers, FSx, the control plane) and CoreDNS on the system nodes."""
    res = _cluster_template(synthesized, env)["Resources"]
    (group,) = [lid for lid, r in res.items() if r["Type"] == "AWS::EC2::SecurityGroup" and lid.startswith("RayHeads")]
    heads = json.dumps({"Fn::GetAtt": [group, "GroupId"]})

    def name(v: dict) -> str:
        text = json.dumps(v)
        if text == heads:
            return "heads"
        if "ClusterSecurityGroupId" in text:
            return "system"
        if "SharedSecurityGroup" in text:
            return "shared"
        if "Scraper" in text:
            return "scraper"
        return text

    rules = {
        (name(p["GroupId"]), name(p["SourceSecurityGroupId"]), p["IpProtocol"], p["FromPort"], p["ToPort"])
        for lid, r in res.items()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress" and lid.startswith("RayHeads")
        for p in [r["Properties"]]
    }
    assert rules == {
        ("heads", "shared", "tcp", 0, 65535),
        ("heads", "system", "tcp", 8265, 8265),
        ("heads", "system", "tcp", 52365, 52365),
        ("heads", "scraper", "tcp", 8080, 8080),
        ("shared", "heads", "tcp", 0, 65535),
        ("system", "heads", "udp", 53, 53),
        ("system", "heads", "tcp", 53, 53),
    }
