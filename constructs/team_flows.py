"""Each team's rows of the flow table (config ``teams``, constructs/team_access.py): what its pods'
role and its members may do in IAM/KMS and in Kubernetes RBAC, and the fences around them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from config.facts.names import gcs_store_secret_name, ray_auth_secret_name, team_ray_auth_secret_name
from constructs.flows import AccessFlow, KubeFlow, KubeRequest, Resource, s3_locations
from manifests import k8s

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from config.teams import Team

# What a team member must never do in the team's namespace: read the synced Ray token (a Secret),
# run a pod of their own (it could name any service account of the namespace, the one with the
# team's Pod Identity role included) or exec into one, mint a service account token, impersonate
# an account, or grant themselves more.
TEAM_FENCES: tuple[tuple[str, KubeRequest], ...] = (
    ("secrets-get", ("", "secrets", "get")),
    ("secrets-list", ("", "secrets", "list")),
    ("secrets-watch", ("", "secrets", "watch")),
    ("pods-create", ("", "pods", "create")),
    ("pods-exec", ("", "pods/exec", "create")),
    ("serviceaccount-token", ("", "serviceaccounts/token", "create")),
    ("serviceaccount-impersonate", ("", "serviceaccounts", "impersonate")),
    ("rolebindings-create", ("rbac.authorization.k8s.io", "rolebindings", "create")),
)
# What a team member must never do in another team's namespace or the platform's.
FOREIGN_FENCES: tuple[tuple[str, KubeRequest], ...] = (
    ("rayjobs-list", ("ray.io", "rayjobs", "list")),
    ("rayjobs-create", ("ray.io", "rayjobs", "create")),
    ("portforward", ("", "pods/portforward", "create")),
)


def _team_role_flow(
    team: Team, name: str, what: str, why: str, actions: tuple[str, ...], resource: Resource, **kw: Any
) -> list[AccessFlow]:
    """A flow of the role that team ``team``'s namespace gives its Ray pods."""
    flow = AccessFlow(
        f"team-{team.name}-{name}",
        f"Team {team.name}'s Ray pods: {what}",
        why,
        "team-role",
        actions,
        resource,
        namespace=team.resolved_namespace,
        **kw,
    )
    return [flow]


def team_access_flows(config: EnvironmentConfig) -> list[AccessFlow]:
    """Each team (config teams, constructs/team_access.py): what its pods' role (the Pod Identity
    association of its namespace) and its members may do, and the fences around it: no read or
    write of another team's prefix, no write of the platform's prefixes, no read of another
    team's or the platform's Ray token. A member's fences are proven against an identity policy
    that allows everything: the platform does not own the members' roles, so only the resource
    policies of the templates may stand between them and another team's token."""
    checkpoints = config.bucket_names()["checkpoints"]
    s3_via = (
        ("kms:ViaService", "s3.{region}.amazonaws.com"),
        ("kms:CallerAccount", "{account}"),
        ("aws:SecureTransport", "true"),
    )
    secret_via = (
        ("kms:ViaService", "secretsmanager.{region}.amazonaws.com"),
        ("kms:CallerAccount", "{account}"),
        ("kms:EncryptionContext:SecretARN", "{secret_arn}"),
    )
    tls = (("aws:SecureTransport", "true"),)
    platform_secret = ray_auth_secret_name(config.name_prefix)
    platform_prefixes = sorted({loc.prefix for loc in s3_locations(config) if loc.bucket == checkpoints})
    flows: list[AccessFlow] = []
    for team in config.teams:
        ns, t, prefix = team.resolved_namespace, team.name, team.s3_prefix
        others = [o for o in config.teams if o is not team]
        secret = team_ray_auth_secret_name(config.name_prefix, t)

        flows += _team_role_flow(
            team,
            "s3",
            f"read and write s3://{checkpoints}/{prefix}",
            f"Their checkpoints and the code `hpray submit job -n {ns}` uploads live under the team's prefix.",
            ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
            "s3-object",
            target=f"{checkpoints}/{prefix}flows-probe",
            context=tls,
        )
        flows += _team_role_flow(
            team,
            "s3-list",
            f"list s3://{checkpoints}/{prefix}",
            "Ray Train lists its checkpoints.",
            ("s3:ListBucket",),
            "s3-bucket",
            target=checkpoints,
            context=(("s3:prefix", prefix), *tls),
        )
        flows += _team_role_flow(
            team,
            "s3-key",
            "use the platform key for their prefix",
            "The checkpoint bucket is SSE-KMS with the platform key.",
            ("kms:Decrypt", "kms:GenerateDataKey"),
            "platform-key",
            target=checkpoints,
            context=(*s3_via, ("kms:EncryptionContext:aws:s3:arn", "{bucket_arn}")),
        )
        for other in others:
            flows += _team_role_flow(
                team,
                f"fence-s3:{other.name}",
                f"no read or write of team {other.name}'s prefix",
                "Teams do not see or overwrite each other's checkpoints.",
                ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
                "s3-object",
                target=f"{checkpoints}/{other.s3_prefix}flows-probe",
                context=tls,
                allowed=False,
            )
        for p in platform_prefixes:
            flows += _team_role_flow(
                team,
                f"fence-s3:{p}",
                f"no write of the platform's s3://{checkpoints}/{p}",
                "Production checkpoints and the platform's job code are not the team's to overwrite.",
                ("s3:PutObject", "s3:DeleteObject"),
                "s3-object",
                target=f"{checkpoints}/{p}flows-probe",
                context=tls,
                allowed=False,
            )
        if not config.eks.ray_token_auth:
            continue
        flows += _team_role_flow(
            team,
            "ray-token",
            "read the team's Ray token",
            "Every Ray pod of the namespace mounts the team's SecretProviderClass, which syncs it.",
            ("secretsmanager:GetSecretValue",),
            "ray-auth-secret",
            target=secret,
            context=tls,
        )
        flows += _team_role_flow(
            team,
            "ray-token-key",
            "decrypt the team's Ray token through Secrets Manager",
            "The secret is encrypted with the platform key.",
            ("kms:Decrypt",),
            "ray-auth-secret-key",
            target=secret,
            context=secret_via,
        )
        fenced: list[tuple[str, Resource, str]] = [
            (o.name, "ray-auth-secret", team_ray_auth_secret_name(config.name_prefix, o.name)) for o in others
        ]
        fenced.append(("platform", "ray-auth-secret", platform_secret))
        if config.gcs_fault_tolerance:
            fenced.append(("gcs-store", "gcs-store-secret", gcs_store_secret_name(config.name_prefix)))
        for whose, kind, other_secret in fenced:
            flows += _team_role_flow(
                team,
                f"fence-token:{whose}",
                f"no read of team {whose}'s Ray token"
                if kind == "ray-auth-secret" and whose != "platform"
                else f"no read of the {whose} token",
                "A token opens every Ray cluster (or store) that uses it: the platform's services included.",
                ("secretsmanager:GetSecretValue",),
                kind,
                target=other_secret,
                context=tls,
                allowed=False,
            )
        for i, member in enumerate(team.principal_arns):
            flows += [
                AccessFlow(
                    f"team-{t}-member{i}-ray-token",
                    f"Team {t}'s member {member} reads the team's Ray token",
                    f"`hpray logs` and `hpray dashboard -n {ns}` call the team's Ray heads with it.",
                    "team-member",
                    ("secretsmanager:GetSecretValue",),
                    "ray-auth-secret",
                    target=secret,
                    context=tls,
                    member=member,
                ),
                AccessFlow(
                    f"team-{t}-member{i}-ray-token-key",
                    f"Team {t}'s member {member} decrypts the team's Ray token through Secrets Manager",
                    "The platform key's policy names the team's members for that secret only.",
                    "team-member",
                    ("kms:Decrypt",),
                    "ray-auth-secret-key",
                    target=secret,
                    context=secret_via,
                    member=member,
                ),
            ]
            for whose, kind, other_secret in fenced:
                flows.append(
                    AccessFlow(
                        f"team-{t}-member{i}-fence-token:{whose}",
                        f"Team {t}'s member {member}: no read of the {whose} token, whatever its own IAM policies allow",
                        "An explicit deny in the secret's resource policy.",
                        "team-member",
                        ("secretsmanager:GetSecretValue",),
                        kind,
                        target=other_secret,
                        context=tls,
                        member=member,
                        allowed=False,
                    )
                )
    return flows


def kube_flows(config: EnvironmentConfig) -> list[KubeFlow]:
    """Per team member: the job commands work in the team's namespace with what the access
    entry gives (``config.facts.permissions.K8S_JOB_COMMANDS``), and the fences hold there and elsewhere."""
    from config.facts.permissions import K8S_JOB_COMMANDS

    flows = []
    namespaces = [k8s.NAMESPACE, *(t.resolved_namespace for t in config.teams)]
    for team in config.teams:
        ns = team.resolved_namespace
        for i, member in enumerate(team.principal_arns):
            base = f"team-{team.name}-member{i}-k8s"
            flows += [
                KubeFlow(
                    f"{base}:{command}",
                    f"`hpray {command} -n {ns}` as team {team.name}'s member {member}",
                    "The job commands act in the team's namespace only.",
                    member,
                    ns,
                    needs,
                )
                for command, needs in K8S_JOB_COMMANDS.items()
            ]
            flows += [
                KubeFlow(
                    f"{base}:fence-{name}",
                    f"team {team.name}'s member {member}: never {verb} {resource} in {ns}",
                    "The namespace holds the team's Ray token and the service account with its Pod Identity role.",
                    member,
                    ns,
                    ((group, resource, verb),),
                    allowed=False,
                )
                for name, (group, resource, verb) in TEAM_FENCES
            ]
            flows += [
                KubeFlow(
                    f"{base}:fence-{other}:{name}",
                    f"team {team.name}'s member {member}: never {verb} {resource} in {other}",
                    "Another team's or the platform's workloads are not the team's.",
                    member,
                    other,
                    ((group, resource, verb),),
                    allowed=False,
                )
                for other in namespaces
                if other != ns
                for name, (group, resource, verb) in FOREIGN_FENCES
            ]
    return flows
