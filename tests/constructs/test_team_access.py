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


def test_a_user_job_in_the_team_namespace_finds_its_claim_account_and_policies():
    """Cross-part: what ``hpray submit job --namespace team-vision`` renders against what the team's
    namespace holds: the /fsx claim bound to a volume of the platform's file system, the service
    account (Pod Identity), and NetworkPolicies that select the job's pods."""
    from ops import job_submit as js
    from workloads.common import security
    from workloads.common.network_policy import NODE_TYPE_LABEL

    dev = parse_environment(env_data("dev"), source="test")
    fsx = ta.FsxVolume("fs-0123456789abcdef0", "fs-0123.fsx.us-east-1.amazonaws.com", "abcdefgh", 1200)
    team = Team(**TEAM)
    manifests = ta.team_manifests(team, fsx, secrets=security.synced_secrets(dev), region=dev.region)
    for m in manifests:
        if m["kind"] != "SecretProviderClass":  # a CRD, not in the Kubernetes schemas
            kubernetes_validate.validate(m, "1.33", strict=True)
    classes = {m["metadata"]["name"] for m in manifests if m["kind"] == "SecretProviderClass"}
    assert dev.eks.ray_token_auth and classes == {security.SECRET_PROVIDER_CLASS}
    volume = next(m for m in manifests if m["kind"] == "PersistentVolume")
    claim = next(m for m in manifests if m["kind"] == "PersistentVolumeClaim")
    assert (
        volume["metadata"]["name"] == "fsx-pv-team-vision"
        and volume["spec"]["csi"]["volumeHandle"] == fsx.file_system_id
    )
    assert volume["spec"]["claimRef"] == {"namespace": "team-vision", "name": claim["metadata"]["name"]}
    assert claim["spec"]["volumeName"] == "fsx-pv-team-vision" and claim["metadata"]["namespace"] == "team-vision"

    p = js.placement(dev, instance_group=None, gpus=None, nodes=1)
    job = js.render_job(dev, name="vision-sft", command=["python", "t.py"], working_dir_uri="s3://b/k.zip", p=p)
    policies = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    accounts = {m["metadata"]["name"] for m in manifests if m["kind"] == "ServiceAccount"}
    for pod in security.pods_for_review(job):
        spec = pod["spec"]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
        assert claims == {claim["metadata"]["name"]}
        assert spec["serviceAccountName"] in accounts
        mounted = {v["csi"]["volumeAttributes"]["secretProviderClass"] for v in spec["volumes"] if "csi" in v}
        assert mounted and mounted <= classes, (mounted, classes)
        labels = dict(pod["metadata"]["labels"])
        if pod["metadata"]["name"].endswith("-head"):
            labels[NODE_TYPE_LABEL] = "head"
        selecting = sorted(
            pol["metadata"]["name"]
            for pol in policies
            if all(labels.get(k) == v for k, v in pol["spec"]["podSelector"].get("matchLabels", {}).items())
        )
        expected = ["default-deny-ingress", "user-jobs-ray-internal"]
        if pod["metadata"]["name"].endswith("-head"):
            expected.insert(1, "user-jobs-from-operator")
        assert selecting == expected
        assert all(pol["metadata"]["namespace"] == "team-vision" for pol in policies)


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
        r["Properties"]["Manifest"]
        for r in template.values()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and "team-vision" in json.dumps(r["Properties"].get("Manifest", ""))
    ]

    # The manifest names the file system by reference (a Fn::Join of JSON text and references).
    def resolved(manifest):
        if isinstance(manifest, str):
            return json.loads(manifest)
        sep, parts = manifest["Fn::Join"]
        return json.loads(sep.join(p if isinstance(p, str) else "REF" for p in parts))

    kinds = [m["kind"] for m in resolved(manifests[0])]
    assert kinds == [
        "Namespace",
        "ResourceQuota",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "NetworkPolicy",
        "NetworkPolicy",
        "NetworkPolicy",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "SecretProviderClass",  # token authentication is on: the team's Ray pods mount it
    ]
    # The KubeRay operator watches the team's namespace (its RayJobs are reconciled) and gets its
    # namespaced RBAC there after the namespace exists.
    [chart] = [
        r for r in template.values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and "kuberay" in json.dumps(r)
    ]
    assert '"watchNamespace":["ray-workloads","team-vision"]' in json.dumps(chart["Properties"]["Values"]).replace(
        "\\", ""
    )
    assert any("Teams" in d for d in chart.get("DependsOn", []))
    # The review proves the team's flows against the synthesized templates: its pods' role (the
    # association of its namespace) reads the job code and decrypts it.
    from review.assembly import load_assembly
    from review.flows import check_flows

    assembly = app.synth()
    results = {r.name: r for r in check_flows(load_assembly(assembly.directory).stacks, config)}
    for name in ("team-vision-job-code", "team-vision-job-code-key"):
        assert results[name].ok, results[name].detail
