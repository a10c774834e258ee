"""Team access: the manifests against the Kubernetes schemas, the Role against what the job
commands need, and dev synthesized with two teams: the flow checks (IAM and Kubernetes RBAC as
evaluated from the synthesized and rendered objects) pass, and fail when a team is given the
platform's workloads role."""

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
OTHER = {"name": "speech", "principal_arns": ["arn:aws:iam::111111111111:role/SpeechTeam"]}
CIDR = "10.0.0.0/16"


def test_manifests_validate_against_kubernetes_schemas():
    manifests = ta.team_manifests(Team(**TEAM), vpc_cidr=CIDR)
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
    # The metrics collector scrapes the team's Ray pods as the workloads' namespace's.
    metrics = [m for m in manifests if m["metadata"]["name"] == "ray-metrics-from-collector"]
    assert len(metrics) == 1 and metrics[0]["metadata"]["namespace"] == "team-vision"
    assert metrics[0]["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": CIDR}}]


def test_the_role_grants_what_every_job_command_needs_and_nothing_on_secrets_or_pods():
    """The needs come from config/facts/permissions.py (what each command does in its namespace)."""
    from config.facts.permissions import K8S_JOB_COMMANDS
    from review.rbac import _matches

    rules = ta.team_role_rules()
    for command, needs in K8S_JOB_COMMANDS.items():
        for need in needs:
            assert any(_matches(r, need) for r in rules), (command, need)
    for forbidden in (
        ("", "secrets", "get"),
        ("", "secrets", "list"),
        ("", "secrets", "watch"),
        ("", "pods", "create"),
        ("", "pods/exec", "create"),
        ("", "serviceaccounts/token", "create"),
        ("", "serviceaccounts", "impersonate"),
        ("", "configmaps", "get"),
    ):
        assert not any(_matches(r, forbidden) for r in rules), forbidden


def test_a_user_job_in_the_team_namespace_finds_its_account_token_and_policies():
    """Cross-part: what ``hpray submit job --namespace team-vision`` renders against what the team's
    namespace holds: no /fsx claim (the shared file system is not fenced per team) and a job
    without one, the service account (Pod Identity), the team's token class, and NetworkPolicies
    that select the job's pods."""
    from manifests import security
    from manifests.network_policy import NODE_TYPE_LABEL
    from ops.submit import job as js

    dev = parse_environment(env_data("dev"), source="test")
    team = Team(**TEAM)
    secret = "hyperpod-ray-dev/teams/vision/ray-auth-token"
    manifests = ta.team_manifests(team, vpc_cidr=CIDR, token_secret_name=secret, region=dev.region)
    for m in manifests:
        if m["kind"] != "SecretProviderClass":  # a CRD, not in the Kubernetes schemas
            kubernetes_validate.validate(m, "1.33", strict=True)
    assert not [m for m in manifests if m["kind"] in ("PersistentVolume", "PersistentVolumeClaim")]
    classes = {m["metadata"]["name"] for m in manifests if m["kind"] == "SecretProviderClass"}
    assert dev.eks.ray_token_auth and classes == {security.SECRET_PROVIDER_CLASS}
    # The class syncs the team's own token, not the platform's, into the Secret KubeRay reads.
    [spc] = [m for m in manifests if m["kind"] == "SecretProviderClass"]
    assert [o["objectName"] for o in json.loads(spc["spec"]["parameters"]["objects"])] == [secret]
    assert spc["spec"]["secretObjects"][0]["secretName"] == security.AUTH_SECRET

    p = js.placement(dev, instance_group=None, gpus=None, nodes=1)
    job = js.render_job(
        dev, name="vision-sft", command=["python", "t.py"], working_dir_uri="s3://b/k.zip", p=p, team=team
    )
    env_vars = json.loads(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env_vars["HPRAY_CHECKPOINT_DIR"] == (
        f"s3://{dev.bucket_names()['checkpoints']}/teams/vision/checkpoints/vision-sft"
    )
    policies = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    accounts = {m["metadata"]["name"] for m in manifests if m["kind"] == "ServiceAccount"}
    for pod in security.pods_for_review(job):
        spec = pod["spec"]
        assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
        mounts = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
        assert mounts <= {v["name"] for v in spec["volumes"]}
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
        expected = ["default-deny-ingress", "ray-metrics-from-collector", "user-jobs-ray-internal"]
        if pod["metadata"]["name"].endswith("-head"):
            expected.insert(2, "user-jobs-from-operator")
        assert selecting == expected
        assert all(pol["metadata"]["namespace"] == "team-vision" for pol in policies)


@pytest.fixture(scope="module")
def two_teams():
    """dev synthesized with two teams: (config, cluster stack, its template's resources, assembly stacks)."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from app import APP_PROPS, build_app
    from review.assembly import load_assembly
    from tests.conftest import cdk_context

    data = env_data("dev")
    data["teams"] = [TEAM, OTHER]
    config = parse_environment(data, source="test")
    app = cdk.App(
        context={**APP_PROPS["context"], **cdk_context(), "env": "dev"},
        **{k: v for k, v in APP_PROPS.items() if k != "context"},
    )
    stacks = build_app(app, config)
    template = Template.from_stack(stacks.cluster).to_json()["Resources"]
    assembly = app.synth()
    return config, stacks.cluster, template, load_assembly(assembly.directory).stacks


@pytest.mark.slow
def test_dev_with_two_teams_synthesizes_fenced_access(two_teams):
    config, cluster, template, _ = two_teams
    entries = [
        r["Properties"]
        for r in template.values()
        if r["Type"] == "AWS::EKS::AccessEntry" and r["Properties"].get("PrincipalArn") == ROLE
    ]
    assert len(entries) == 1
    assert entries[0]["KubernetesGroups"] == ["hpray:team:vision"]
    # No EKS access policy: AmazonEKSEditPolicy would let a member read Secrets and run pods.
    assert not entries[0].get("AccessPolicies")
    assoc = {
        r["Properties"]["Namespace"]: r["Properties"]
        for r in template.values()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation"
    }
    assert assoc["team-vision"]["ServiceAccount"] == "ray-workloads"
    roles = {ns: a["RoleArn"]["Fn::GetAtt"][0] for ns, a in assoc.items()}
    workloads_role = cluster.get_logical_id(cluster.workloads.role.node.default_child)
    # Each namespace its own role.
    assert roles["ray-workloads"] == workloads_role
    assert len({roles["ray-workloads"], roles["team-vision"], roles["team-speech"]}) == 3
    secrets = sorted(r["Properties"]["Name"] for r in template.values() if r["Type"] == "AWS::SecretsManager::Secret")
    from config.facts.names import team_ray_auth_secret_name

    assert {team_ray_auth_secret_name(config.name_prefix, t) for t in ("vision", "speech")} <= set(secrets)
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
        "NetworkPolicy",  # the metrics collector's
        "SecretProviderClass",  # token authentication is on: the team's Ray pods mount it
    ]
    # The KubeRay operator watches the team's namespace (its RayJobs are reconciled) and gets its
    # namespaced RBAC there after the namespace exists.
    [chart] = [
        r for r in template.values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and "kuberay" in json.dumps(r)
    ]
    assert '"watchNamespace":["ray-workloads","team-vision","team-speech"]' in json.dumps(
        chart["Properties"]["Values"]
    ).replace("\\", "")
    assert any("Teams" in d for d in chart.get("DependsOn", []))


@pytest.mark.slow
def test_the_flow_checks_pass_for_two_teams(two_teams):
    """IAM (synthesized policies, resource and key policies) and Kubernetes RBAC (access entries
    and the applied Roles) for both teams: every flow allowed, every fence holding."""
    from review.flows import check_flows

    config, _, _, stacks = two_teams
    results = check_flows(stacks, config)
    assert [f"{r.name}: {r.detail}" for r in results if not r.ok] == []
    names = {r.name for r in results}
    for t, other in (("vision", "speech"), ("speech", "vision")):
        for expected in (
            f"team-{t}-s3",
            f"team-{t}-s3-key",
            f"team-{t}-fence-s3:{other}",
            f"team-{t}-fence-s3:checkpoints/",
            f"team-{t}-fence-s3:jobs/",
            f"team-{t}-ray-token",
            f"team-{t}-fence-token:{other}",
            f"team-{t}-fence-token:platform",
            f"team-{t}-member0-ray-token",
            f"team-{t}-member0-ray-token-key",
            f"team-{t}-member0-fence-token:platform",
            f"team-{t}-member0-fence-token:{other}",
            f"team-{t}-member0-fence-token:gcs-store",  # dev has GCS fault tolerance
            f"team-{t}-member0-k8s:jobs",
            f"team-{t}-member0-k8s:logs",
            f"team-{t}-member0-k8s:fence-secrets-get",
            f"team-{t}-member0-k8s:fence-pods-create",
            f"team-{t}-member0-k8s:fence-serviceaccount-token",
            f"team-{t}-member0-k8s:fence-ray-workloads:rayjobs-list",
            f"team-{t}-member0-k8s:fence-team-{other}:rayjobs-list",
        ):
            assert expected in names, expected


def _broken(stacks, config, mutate):
    import copy

    from review.flows import check_flows

    stacks = copy.deepcopy(stacks)
    for s in stacks:
        for lid, r in (s.template.get("Resources") or {}).items():
            mutate(s, lid, r)
    return {r.name: r.detail for r in check_flows(stacks, config) if not r.ok}


@pytest.mark.slow
def test_the_flow_checks_fail_when_a_team_gets_the_platform_role(two_teams):
    config, cluster, _, stacks = two_teams
    workloads_role = cluster.get_logical_id(cluster.workloads.role.node.default_child)

    def platform_role(s, lid, r):
        if r["Type"] == "AWS::EKS::PodIdentityAssociation" and r["Properties"]["Namespace"] == "team-vision":
            r["Properties"]["RoleArn"] = {"Fn::GetAtt": [workloads_role, "Arn"]}

    broken = _broken(stacks, config, platform_role)
    # Team vision's pods could overwrite the platform's checkpoints and read the platform's token.
    assert "team-vision-fence-s3:checkpoints/" in broken
    assert "s3:PutObject" in broken["team-vision-fence-s3:checkpoints/"]
    assert "team-vision-fence-token:platform" in broken
    assert "team-vision-ray-token" in broken  # and its own token is out of reach
    assert not [n for n in broken if n.startswith("team-speech")]


@pytest.mark.slow
def test_the_flow_checks_fail_when_a_team_gets_the_edit_policy(two_teams):
    config, _, _, stacks = two_teams

    def edit_policy(s, lid, r):
        if r["Type"] == "AWS::EKS::AccessEntry" and r["Properties"].get("PrincipalArn") == ROLE:
            r["Properties"]["AccessPolicies"] = [
                {
                    "PolicyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy",
                    "AccessScope": {"Type": "namespace", "Namespaces": ["team-vision"]},
                }
            ]

    broken = _broken(stacks, config, edit_policy)
    assert set(broken) == {
        "team-vision-member0-k8s:fence-secrets-get",
        "team-vision-member0-k8s:fence-secrets-list",
        "team-vision-member0-k8s:fence-secrets-watch",
        "team-vision-member0-k8s:fence-pods-create",
        "team-vision-member0-k8s:fence-pods-exec",
        "team-vision-member0-k8s:fence-serviceaccount-impersonate",
    }, broken
    assert "AmazonEKSEditPolicy" in broken["team-vision-member0-k8s:fence-secrets-get"]


@pytest.mark.slow
def test_without_the_explicit_denies_a_members_own_policies_would_open_every_token(two_teams):
    """The members' fences are proven against an identity policy that allows everything: only the
    deny statements of the secrets' resource policies hold them."""
    config, _, _, stacks = two_teams

    def no_denies(s, lid, r):
        if r["Type"] == "AWS::SecretsManager::ResourcePolicy":
            doc = r["Properties"]["ResourcePolicy"]
            doc["Statement"] = [st for st in doc["Statement"] if st["Effect"] != "Deny"]

    broken = _broken(stacks, config, no_denies)
    assert set(broken) == {
        f"team-{t}-member0-fence-token:{whose}"
        for t, other in (("vision", "speech"), ("speech", "vision"))
        for whose in (other, "platform", "gcs-store")
    }, broken
