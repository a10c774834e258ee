"""Team access without cluster-admin (config ``teams``): per team a namespace with a ResourceQuota,
a Role for the Ray resources bound to the team's Kubernetes group, the workloads service account
(Pod Identity, the workloads role), the NetworkPolicies of the workloads' namespace, a claim on
the FSx file system (/fsx in every Ray pod), and one EKS access entry per IAM principal with the
AmazonEKSEditPolicy scoped to the team's namespace and that group.

EKS access policies cover Kubernetes' built-in resources only; the Role adds KubeRay's (RayJobs,
RayServices, RayClusters) and what ``hpray logs``/``dashboard`` read. The manifest builders are pure
(tests validate them against the Kubernetes schemas).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from config.names import WORKLOADS_SERVICE_ACCOUNT
from config.teams import Team
from constructs.workloads_access import FsxVolume, fsx_claim_manifests
from workloads.common import network_policy, security

_LABELS = {"app.kubernetes.io/part-of": "hyperpod-ray", "app.kubernetes.io/managed-by": "aws-cdk"}
EDIT_POLICY = "AmazonEKSEditPolicy"
ROLE_NAME = "hpray-team"


def team_group(team: Team) -> str:
    """The Kubernetes group the team's access entries put its principals in."""
    return f"hpray:team:{team.name}"


def team_manifests(
    team: Team,
    fsx: FsxVolume | None = None,
    *,
    secrets: Sequence[security.SyncedSecret] = (),
    region: str = "",
) -> list[dict[str, Any]]:
    """The team's namespace with its quota, RBAC, workloads service account and NetworkPolicies
    (as the workloads' namespace: default deny, ``hpray submit job`` pods reach each other and the
    operator reaches their heads); with ``fsx``, its /fsx claim on the platform's file system; with
    ``secrets`` (Ray token authentication), the SecretProviderClass every Ray pod mounts, as in the
    workloads' namespace: a pod mounting a missing class never starts."""
    ns = team.resolved_namespace
    labels = {**_LABELS, "hpray.io/team": team.name}
    q = team.quota
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "team-quota", "namespace": ns, "labels": labels},
            "spec": {
                "hard": {
                    "requests.nvidia.com/gpu": str(q.gpus),
                    "requests.cpu": str(q.cpus),
                    "requests.memory": f"{q.memory_gib}Gi",
                    "count/rayjobs.ray.io": str(q.rayjobs),
                }
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": ROLE_NAME, "namespace": ns, "labels": labels},
            "rules": [
                {
                    "apiGroups": ["ray.io"],
                    "resources": ["rayjobs", "rayservices", "rayclusters"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["pods", "pods/log", "events", "services"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": ROLE_NAME, "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": team_group(team)}],
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": WORKLOADS_SERVICE_ACCOUNT, "namespace": ns, "labels": labels},
        },
        *network_policy.team_policies(ns),
        *(fsx_claim_manifests(fsx, namespace=ns, volume_name=team_volume_name(team)) if fsx else []),
        *([security.secret_provider_class(secrets, region=region, namespace=ns)] if secrets else []),
    ]


def team_volume_name(team: Team) -> str:
    """The team's PersistentVolume of the FSx file system (cluster-scoped, so named per team)."""
    return f"fsx-pv-{team.resolved_namespace}"


class TeamAccess(Construct):
    """Namespaces, quotas, RBAC and EKS access entries for the configured teams."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        teams: list[Team],
        workloads_role: iam.IRole,
        fsx: FsxVolume | None = None,
        secrets: Sequence[security.SyncedSecret] = (),
        region: str = "",
        secrets_depend_on: Sequence[IConstruct] = (),
    ) -> None:
        """``secrets``: what the Ray pods' CSI volume syncs (security.synced_secrets); then
        ``secrets_depend_on`` (the Secrets Store add-on that brings the CRD, the secrets) come first."""
        super().__init__(scope, construct_id)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        self.access_entries: list[eks.AccessEntry] = []
        for team in teams:
            ns = team.resolved_namespace
            # aws-cdk-lib's bindings: aws_eks_v2.Cluster lacks ICluster's `kubectl_provider_options` (arg-type).
            manifest = eks.KubernetesManifest(
                self,
                f"{team.name}-Namespace",
                cluster=cluster,  # type: ignore[arg-type]
                manifest=team_manifests(team, fsx, secrets=secrets, region=region),
            )
            if secrets:
                manifest.node.add_dependency(*secrets_depend_on)
            self.manifests[team.name] = manifest
            association = eks.CfnPodIdentityAssociation(
                self,
                f"{team.name}-PodIdentity",
                cluster_name=cluster.cluster_name,
                namespace=ns,
                service_account=WORKLOADS_SERVICE_ACCOUNT,
                role_arn=workloads_role.role_arn,
            )
            association.node.add_dependency(manifest)
            for i, arn in enumerate(team.principal_arns):
                entry = eks.AccessEntry(
                    self,
                    f"{team.name}-Access{i}",
                    cluster=cluster,  # type: ignore[arg-type]  # as above
                    principal=arn,
                    access_policies=[
                        eks.AccessPolicy.from_access_policy_name(
                            EDIT_POLICY, access_scope_type=eks.AccessScopeType.NAMESPACE, namespaces=[ns]
                        )
                    ],
                )
                # The group the RoleBinding names (the L2 construct has no property for it).
                cfn_entry = entry.node.default_child
                assert isinstance(cfn_entry, eks.CfnAccessEntry)
                cfn_entry.add_property_override("KubernetesGroups", [team_group(team)])
                self.access_entries.append(entry)
