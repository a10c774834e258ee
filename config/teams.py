"""Teams that share an environment without cluster-admin: each gets its own namespace with a
ResourceQuota, and its IAM principals get EKS access entries scoped to that namespace
(constructs/team_access.py)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config.base import Frozen
from config.fields import iam_principal_arns

# The team's prefix of the checkpoint bucket: teams/<name>/ (its Pod Identity role reads and
# writes there only; ``hpray submit job -n NS`` uploads a team's code under it).
TEAMS_PREFIX = "teams/"
TEAM_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$")
# Namespaces of the platform itself; a team never gets one of these.
RESERVED_NAMESPACES = frozenset(
    {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "ray-workloads",
        "kuberay-system",
        "aws-hyperpod",
        "amazon-cloudwatch",
    }
)


class TeamQuota(Frozen):
    """The namespace's ResourceQuota: what the team's pods may request in total."""

    gpus: int = Field(
        default=8, ge=0, le=4096, description="GPUs (nvidia.com/gpu requests) the team's pods may hold at once."
    )
    cpus: int = Field(default=192, ge=1, description="CPUs the team's pods may request in total.")
    memory_gib: int = Field(default=1536, ge=1, description="Memory in GiB the team's pods may request in total.")
    rayjobs: int = Field(
        default=10, ge=1, le=1000, description="RayJobs that may exist in the team's namespace at once."
    )


class Team(Frozen):
    """A team: its IAM principals get EKS access scoped to its namespace, which has a quota."""

    name: str = Field(
        description="Team name: 1-20 lowercase letters, digits and hyphens, starting with a letter; unique."
    )
    principal_arns: list[str] = Field(
        min_length=1,
        description=(
            "IAM roles or users of the team (e.g. the role its SSO permission set creates); each in one team "
            "only, and not in eks.admin_principal_arns."
        ),
    )
    namespace: str | None = Field(
        default=None, description=("The team's Kubernetes namespace, not a platform one; null: team-<name>.")
    )
    quota: TeamQuota = Field(default_factory=TeamQuota, description="The namespace's ResourceQuota.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not TEAM_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a team name; allowed: 1-20 lowercase letters, digits and hyphens, starting with a letter"
            )
        return v

    @field_validator("principal_arns")
    @classmethod
    def _arns(cls, v: list[str]) -> list[str]:
        return iam_principal_arns(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 63 or not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", v)):
            raise ValueError(
                f"{v!r} is not a Kubernetes namespace name; allowed: up to 63 lowercase letters, digits and hyphens"
            )
        if v in RESERVED_NAMESPACES:
            raise ValueError(f"{v!r} is a platform namespace; reserved: {', '.join(sorted(RESERVED_NAMESPACES))}")
        return v

    @property
    def resolved_namespace(self) -> str:
        return self.namespace or f"team-{self.name}"

    @property
    def s3_prefix(self) -> str:
        """The team's prefix of the checkpoint bucket, the only one its pods may write."""
        return f"{TEAMS_PREFIX}{self.name}/"


def team_of_namespace(teams: list[Team], namespace: str) -> Team | None:
    """The team whose namespace ``namespace`` is; None for the platform's."""
    return next((t for t in teams if t.resolved_namespace == namespace), None)


def team_errors(teams: list[Team], admin_arns: list[str]) -> list[str]:
    """Rules across teams: names, namespaces and principals each belong to one team; an admin is
    not also a team member (one principal has one EKS access entry)."""
    errors = []
    seen: dict[str, dict[str, str]] = {"name": {}, "namespace": {}, "principal": {}}
    for i, team in enumerate(teams):
        for kind, values in (
            ("name", [team.name]),
            ("namespace", [team.resolved_namespace]),
            ("principal", team.principal_arns),
        ):
            for value in values:
                if value in seen[kind]:
                    errors.append(
                        f"teams[{i}]: {kind} {value!r} is already team {seen[kind][value]!r}'s; each {kind} belongs to one team"
                    )
                seen[kind][value] = team.name
        for arn in team.principal_arns:
            if arn in admin_arns:
                errors.append(
                    f"teams[{i}].principal_arns: {arn!r} is in eks.admin_principal_arns; a principal has one access entry"
                )
    return errors


def team_prefix_errors(teams: list[Team], checkpoint_bucket: str, locations: dict[str, str | None]) -> list[str]:
    """With teams, no prefix of the platform's in the checkpoint bucket lies under ``TEAMS_PREFIX``
    (a team's role would read and write it). ``locations``: config field -> its S3 prefix of the
    checkpoint bucket or its s3:// URI."""
    if not teams:
        return []
    errors = []
    for field, value in locations.items():
        if not value:
            continue
        key = value
        if value.startswith("s3://"):
            bucket, _, key = value.removeprefix("s3://").partition("/")
            if bucket != checkpoint_bucket:
                continue
        if key.startswith(TEAMS_PREFIX):
            errors.append(
                f"{field}: {value!r} is under {TEAMS_PREFIX} of the checkpoint bucket, where each team's pods read "
                f"and write their own prefix; allowed: any prefix outside {TEAMS_PREFIX}"
            )
    return errors
