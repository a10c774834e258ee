"""Team access: the manifests against the Kubernetes schemas, and dev synthesized with one team
(access entries scoped to its namespace, the group its RoleBinding names, Pod Identity)."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from constructs import team_access as ta

from config import parse_environment
from config.teams import Team
from tests.ops.fakes import env_data

ROLE = "arn:aws:iam::111111111111:role/VisionTeam"
TEAM = {"name": "vision", "principal_arns": [ROLE], "quota": {"gpus": 4, "cpus": 48, "memory_gib": 384, "rayjobs": 3}}


def test_manifests_validate_against_kubernetes_schemas():
    manifests = ta.team_manifests(Team(**TEAM))
    for m in manifests:
        kubernetes_validate.validate(m, "1.33", strict=True)
    by_kind = {m["kind"]: m for m in manifests}
    assert {m["metadata"].get("namespace", m["metadata"]["name"]) for m in manifests} == {"team-vision"}
    assert by_kind["ResourceQuota"]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4",
        "requests.cpu": "48",
        "requests.memory": "384Gi",
        "count/rayjobs.ray.io": "3",
    }
    assert by_kind["RoleBinding"]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "hpray:team:vision"}
    ]
    ray_rule = by_kind["Role"]["rules"][0]
    assert ray_rule["apiGroups"] == ["ray.io"] and "rayjobs" in ray_rule["resources"] and "patch" in ray_rule["verbs"]
    # No rule reaches beyond the namespace: a Role, not a ClusterRole, and no wildcard.
    assert "*" not in json.dumps(by_kind["Role"]["rules"])


@pytest.mark.slow
def test_dev_with_a_team_synthesizes_scoped_access():
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from app import APP_PROPS, build_app
    from tests.conftest import cdk_context

    data = env_data("dev")
    data["teams"] = [TEAM]
    config = parse_environment(data, source="test")
    app = cdk.App(
        context={**APP_PROPS["context"], **cdk_context(), "env": "dev"},
        **{k: v for k, v in APP_PROPS.items() if k != "context"},
    )
    stacks = build_app(app, config)
    template = Template.from_stack(stacks.cluster).to_json()["Resources"]
    entries = [
        r["Properties"]
        for r in template.values()
        if r["Type"] == "AWS::EKS::AccessEntry" and r["Properties"].get("PrincipalArn") == ROLE
    ]
    assert len(entries) == 1
    assert entries[0]["KubernetesGroups"] == ["hpray:team:vision"]
    [policy] = entries[0]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "namespace", "Namespaces": ["team-vision"]}
    assert "AmazonEKSEditPolicy" in json.dumps(policy["PolicyArn"])
    assoc = [
        r["Properties"]
        for r in template.values()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation" and r["Properties"]["Namespace"] == "team-vision"
    ]
    assert len(assoc) == 1 and assoc[0]["ServiceAccount"] == "ray-workloads"
    workloads_role = stacks.cluster.get_logical_id(stacks.cluster.workloads.role.node.default_child)
    assert assoc[0]["RoleArn"] == {"Fn::GetAtt": [workloads_role, "Arn"]}
    manifests = [
        json.loads(r["Properties"]["Manifest"])
        for r in template.values()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and "team-vision" in json.dumps(r["Properties"].get("Manifest", ""))
    ]
    assert [m["kind"] for m in manifests[0]] == ["Namespace", "ResourceQuota", "Role", "RoleBinding", "ServiceAccount"]
