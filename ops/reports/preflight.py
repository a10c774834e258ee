"""``preflight``: is this account and region ready for ``cdk deploy`` of the environment?

With ``network.images_from_ecr`` it also checks the Docker Hub credential and every pull-through
cache rule (ops/images.py): run it before the first deploy, and again after the cluster stack and
before the HyperPod stack. It also fails while the workloads image's base has no digest in
workloads/Dockerfile (ops/base_image.py; ``hpray images pin-base`` fills it).

Gathering (a handful of read-only AWS calls) is kept apart from judging: every ``evaluate_*``
function is pure, takes the API responses and the config, and returns :class:`Check` rows.

One module because it is one command whose checks share the gathered API responses.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from config.environment import EnvironmentConfig
from ops.clients.aws import Aws
from ops.errors import NotFoundError
from ops.reports.addons import LABEL as ADDONS_LABEL
from ops.reports.addons import evaluate_addon_builds, offered_builds
from ops.reports.base_image import base_check
from ops.reports.checks import FAIL, PASS, WARN, Check
from ops.reports.checks import guarded as _guarded
from ops.reports.images import image_checks
from ops.reports.names import stack_names

# The CDK bootstrap stack's default name (``cdk bootstrap`` without --toolkit-stack-name).
DEFAULT_TOOLKIT_STACK = "CDKToolkit"
# This app's synthesized manifest asks for bootstrap version 8 (cdk.out/manifest.json,
# requiresBootstrapStackVersion: 6 for the deploy role, 8 for the lookup and asset roles).
MIN_BOOTSTRAP_VERSION = 8
# CloudFormation states in which the bootstrap stack's roles and bucket are usable.
USABLE_STACK_STATES = frozenset(
    {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE", "IMPORT_ROLLBACK_COMPLETE"}
)


def quota_name(instance_type: str) -> str:
    """The Service Quotas name of the HyperPod quota for one instance type (service ``sagemaker``)."""
    return f"{instance_type} for cluster usage"


def required_instances(config: EnvironmentConfig) -> dict[str, int]:
    """Instances of each type the environment's HyperPod instance groups ask for, summed."""
    needed: dict[str, int] = {}
    for group in config.hyperpod.instance_groups:
        if group.instance_count > 0:
            needed[group.instance_type] = needed.get(group.instance_type, 0) + group.instance_count
    return dict(sorted(needed.items()))


# ---------------------------------------------------------------------------------------------
# Pure evaluation
# ---------------------------------------------------------------------------------------------


def evaluate_identity(identity: dict[str, Any], config: EnvironmentConfig) -> Check:
    account, arn = identity.get("Account"), identity.get("Arn", "?")
    if account != config.account:
        return Check(
            "credentials",
            FAIL,
            f"credentials are for account {account} ({arn}); environment {config.name!r} deploys to "
            f"account {config.account}",
            f"use credentials for account {config.account} (--profile NAME or AWS_PROFILE)",
        )
    return Check("credentials", PASS, f"account {account} as {arn}")


def evaluate_quotas(
    needed: dict[str, int],
    applied: dict[str, dict[str, Any]],
    defaults: dict[str, dict[str, Any]],
    region: str,
) -> list[Check]:
    """One row per instance type: the account's quota (applied value, else AWS default) vs. need."""
    checks = []
    for instance_type, count in needed.items():
        name = quota_name(instance_type)
        label = f"quota {instance_type}"
        quota = applied.get(name) or defaults.get(name)
        if quota is None:
            checks.append(
                Check(
                    label,
                    FAIL,
                    f"no Service Quotas entry named {name!r} (service sagemaker) in {region}: HyperPod "
                    "may not offer this instance type in the region",
                    "pick an instance type HyperPod offers in the region, or another region",
                )
            )
            continue
        value = int(quota.get("Value", 0))
        source = "applied" if name in applied else "AWS default"
        if value >= count:
            checks.append(Check(label, PASS, f"{name!r} is {value} ({source}); configured {count}"))
        else:
            code = quota.get("QuotaCode", "QUOTA_CODE")
            checks.append(
                Check(
                    label,
                    FAIL,
                    f"{name!r} is {value} ({source}); the instance groups need {count}",
                    f"aws service-quotas request-service-quota-increase --service-code sagemaker "
                    f"--quota-code {code} --desired-value {count} --region {region}",
                )
            )
    return checks


def evaluate_availability_zones(config: EnvironmentConfig, zones: list[dict[str, Any]]) -> list[Check]:
    """Every configured AZ ID exists (and is available) in the region, with the configured name.

    AZ names map to physical zones differently in each account; IDs do not. The VPC's subnets are
    placed by name and HyperPod's by ID, so a name that maps to another ID here splits them.
    """
    by_id = {z["ZoneId"]: z for z in zones}
    checks = []
    for i, az in enumerate(config.network.availability_zones):
        label = f"az {az.id}"
        zone = by_id.get(az.id)
        if zone is None:
            checks.append(_missing_az(label, az.id, f"network.availability_zones[{i}].id", config, by_id))
        elif zone.get("State") != "available":
            checks.append(
                Check(label, FAIL, f"{az.id} is {zone.get('State')!r} in {config.region}", "choose an available AZ")
            )
        elif zone.get("ZoneName") != az.name:
            checks.append(
                Check(
                    label,
                    FAIL,
                    f"in this account {az.id} is {zone['ZoneName']}, but the config names it {az.name}",
                    f"set network.availability_zones[{i}] to {{name: {zone['ZoneName']}, id: {az.id}}} "
                    f"in config/{config.name}.yaml",
                )
            )
        else:
            checks.append(Check(label, PASS, f"{az.id} is {az.name}, available"))
    # Every HyperPod subnet is in one of these AZs (config/network.py), so checked above.
    return checks


def _missing_az(label: str, az_id: str, field: str, config: EnvironmentConfig, by_id: dict[str, Any]) -> Check:
    known = ", ".join(f"{zid} ({z['ZoneName']})" for zid, z in sorted(by_id.items())) or "none"
    return Check(
        label,
        FAIL,
        f"AZ ID {az_id} ({field}) does not exist in {config.region}; this account has: {known}",
        f"set {field} in config/{config.name}.yaml to one of the region's AZ IDs",
    )


def _version_status(entry: dict[str, Any]) -> str:
    # ``versionStatus`` (UNSUPPORTED | STANDARD_SUPPORT | EXTENDED_SUPPORT) replaced the older
    # lower-case ``status`` field; accept either.
    raw = entry.get("versionStatus") or entry.get("status") or ""
    return str(raw).upper().replace("-", "_")


def extended_support_monthly_extra() -> float | None:
    """What extended support adds to one control plane per month, from the price table (config/prices.py)
    (the same figure as the cost report); None without a price table."""
    from config.prices import extended_support_monthly_extra as from_prices

    return from_prices()


def evaluate_kubernetes_version(
    version: str, region: str, versions: list[dict[str, Any]], *, monthly_extra: float | None = None
) -> Check:
    """EKS offers ``version`` in the region, HyperPod supports it, and what its support costs."""
    from config.versions import HYPERPOD_KUBERNETES_VERSIONS

    label = f"eks {version}"
    if version not in HYPERPOD_KUBERNETES_VERSIONS:
        return Check(
            label,
            FAIL,
            f"SageMaker HyperPod does not support Kubernetes {version}; it supports "
            f"{', '.join(HYPERPOD_KUBERNETES_VERSIONS)}",
            "set eks.kubernetes_version to a version both support",
        )
    offered = {v.get("clusterVersion"): v for v in versions}
    entry = offered.get(version)
    supported = sorted(
        (v for v, e in offered.items() if v and _version_status(e) in ("STANDARD_SUPPORT", "EXTENDED_SUPPORT")),
        key=lambda s: tuple(int(p) for p in s.split(".")),
    )
    allowed = ", ".join(supported) or "none"
    if entry is None or _version_status(entry) == "UNSUPPORTED":
        return Check(
            label,
            FAIL,
            f"EKS does not offer Kubernetes {version} in {region}; offered: {allowed}",
            "set eks.kubernetes_version to an offered version",
        )
    status = _version_status(entry)
    if status == "EXTENDED_SUPPORT":
        return Check(
            label,
            WARN,
            f"Kubernetes {version} is in extended support in {region} (extra per-cluster-hour charge"
            f"{', ends ' + str(entry['endOfExtendedSupportDate'])[:10] if entry.get('endOfExtendedSupportDate') else ''})"
            + (f": ${monthly_extra:,.0f} a month more than standard support" if monthly_extra else ""),
            _upgrade_fix(version, offered),
        )
    return Check(label, PASS, f"Kubernetes {version} is offered in {region} ({status.lower().replace('_', ' ')})")


def _upgrade_fix(version: str, offered: dict[str | None, dict[str, Any]]) -> str:
    from config.versions import HYPERPOD_KUBERNETES_VERSIONS, next_minor

    standard = [v for v, e in offered.items() if v and _version_status(e) == "STANDARD_SUPPORT"]
    both = sorted(
        (v for v in standard if v in HYPERPOD_KUBERNETES_VERSIONS), key=lambda s: tuple(int(p) for p in s.split("."))
    )
    if both:
        return f"plan an upgrade (one minor at a time): hpray upgrade plan --env NAME --to {next_minor(version)}; in standard support and HyperPod: {', '.join(both)}"
    return (
        f"no version HyperPod supports is in standard support in this region yet; stay on the newest HyperPod "
        f"supports ({HYPERPOD_KUBERNETES_VERSIONS[-1]}): hpray upgrade plan --env NAME --to {next_minor(version)}"
        if version != HYPERPOD_KUBERNETES_VERSIONS[-1]
        else "no version HyperPod supports is in standard support yet; upgrade when HyperPod adds the next one"
    )


def evaluate_bootstrap(
    stack: dict[str, Any] | None, stack_name: str, account: str, region: str, *, pipeline_account: str | None = None
) -> Check:
    label = "cdk bootstrap"
    fix = f"npx cdk bootstrap aws://{account}/{region}"
    if stack is None:
        return Check(label, FAIL, f"no CloudFormation stack {stack_name!r} in {region}", fix)
    state = stack.get("StackStatus", "?")
    if state not in USABLE_STACK_STATES:
        return Check(label, FAIL, f"{stack_name} is {state}", f"fix or delete the stack, then {fix}")
    outputs = {o.get("OutputKey"): o.get("OutputValue") for o in stack.get("Outputs", [])}
    try:
        version = int(outputs.get("BootstrapVersion", ""))
    except ValueError:
        return Check(label, FAIL, f"{stack_name} has no BootstrapVersion output: not a CDK bootstrap stack?", fix)
    if version < MIN_BOOTSTRAP_VERSION:
        return Check(
            label, FAIL, f"{stack_name} is bootstrap version {version}; this app needs >= {MIN_BOOTSTRAP_VERSION}", fix
        )
    if pipeline_account and pipeline_account != account:
        # A cross-account pipeline assumes this account's bootstrap roles: `cdk bootstrap --trust`.
        params = {p.get("ParameterKey"): p.get("ParameterValue") or "" for p in stack.get("Parameters", [])}
        trusted = [a.strip() for a in params.get("TrustedAccounts", "").split(",") if a.strip()]
        if pipeline_account not in trusted:
            return Check(
                label,
                FAIL,
                f"{stack_name} does not trust the pipeline account {pipeline_account} (TrustedAccounts: {', '.join(trusted) or 'none'}), "
                "so the pipeline cannot deploy here",
                f"{fix} --trust {pipeline_account} --cloudformation-execution-policies arn:aws:iam::aws:policy/AdministratorAccess "
                "(or your narrower deployment policy)",
            )
        return Check(
            label,
            PASS,
            f"{stack_name} {state}, bootstrap version {version}, trusts the pipeline account {pipeline_account}",
        )
    return Check(label, PASS, f"{stack_name} {state}, bootstrap version {version}")


def evaluate_vpc_overlap(config: EnvironmentConfig, vpcs: list[dict[str, Any]]) -> Check:
    """A warning per existing VPC whose CIDRs overlap ours (peering or a TGW would then fail).

    The environment's own VPC (tagged by CloudFormation with our network stack) is not counted:
    preflight also runs before updates.
    """
    label = "vpc cidr overlap"
    own_stack = stack_names(config)["network"]
    ours = [("network.vpc_cidr", ipaddress.IPv4Network(config.network.vpc_cidr))] + [
        (f"network.hyperpod_cidr_blocks[{i}]", ipaddress.IPv4Network(b))
        for i, b in enumerate(config.network.hyperpod_cidr_blocks)
    ]
    clashes = []
    for vpc in vpcs:
        tags = {t.get("Key"): t.get("Value") for t in vpc.get("Tags", []) or []}
        if tags.get("aws:cloudformation:stack-name") == own_stack:
            continue
        cidrs = [
            a["CidrBlock"]
            for a in vpc.get("CidrBlockAssociationSet", [])
            if a.get("CidrBlockState", {}).get("State") == "associated"
        ]
        if not cidrs and vpc.get("CidrBlock"):
            cidrs = [vpc["CidrBlock"]]
        for cidr in cidrs:
            theirs = ipaddress.IPv4Network(cidr)
            for field, net in ours:
                if net.overlaps(theirs):
                    name = f" ({tags['Name']})" if tags.get("Name") else ""
                    clashes.append(f"{vpc.get('VpcId')}{name} {theirs} overlaps {field} {net}")
    if clashes:
        return Check(
            label,
            WARN,
            "; ".join(clashes),
            "if these VPCs must ever be peered or attached to one transit gateway with this one, "
            f"change the CIDRs in config/{config.name}.yaml",
        )
    return Check(label, PASS, f"no other VPC in {config.region} overlaps {', '.join(str(n) for _, n in ours)}")


# ---------------------------------------------------------------------------------------------
# Gathering
# ---------------------------------------------------------------------------------------------


def _quotas_by_name(aws: Aws, method: str) -> dict[str, dict[str, Any]]:
    quotas = aws.paginate("service-quotas", method, "Quotas", ServiceCode="sagemaker")
    return {q["QuotaName"]: q for q in quotas if "QuotaName" in q}


def run_preflight(
    config: EnvironmentConfig,
    aws: Aws,
    *,
    toolkit_stack: str = DEFAULT_TOOLKIT_STACK,
    pipeline_account: str | None = None,
    dockerfile: Path | None = None,
) -> list[Check]:
    """``pipeline_account``: the account of the delivery pipeline that deploys this environment
    (config/pipeline.yaml), whose roles the CDK bootstrap must trust when it is another account.
    ``dockerfile``: the workloads Dockerfile whose base digest is checked (default: the checkout's)."""
    # Credentials first: without them nothing else can be checked (CredentialsError propagates).
    checks = [evaluate_identity(aws.call("sts", "get_caller_identity"), config)]

    def quotas() -> list[Check]:
        # ListServiceQuotas returns applied values; quotas never changed by the account are only
        # in the AWS defaults list.
        applied = _quotas_by_name(aws, "list_service_quotas")
        defaults = _quotas_by_name(aws, "list_aws_default_service_quotas")
        return evaluate_quotas(required_instances(config), applied, defaults, config.region)

    def zones() -> list[Check]:
        response = aws.call("ec2", "describe_availability_zones", AllAvailabilityZones=False)
        return evaluate_availability_zones(config, response.get("AvailabilityZones", []))

    def kubernetes() -> Check:
        versions = aws.paginate(
            "eks", "describe_cluster_versions", "clusterVersions", clusterType="eks", includeAll=True
        )
        return evaluate_kubernetes_version(
            config.eks.kubernetes_version, config.region, versions, monthly_extra=extended_support_monthly_extra()
        )

    def addons() -> list[Check]:
        from config.versions import ADDON_VERSIONS

        version = config.eks.kubernetes_version
        pins = ADDON_VERSIONS.get(version, {})
        return evaluate_addon_builds(version, config.region, pins, offered_builds(aws, version))

    def bootstrap() -> Check:
        try:
            stacks = aws.call("cloudformation", "describe_stacks", StackName=toolkit_stack).get("Stacks", [])
        except NotFoundError:
            stacks = []
        return evaluate_bootstrap(
            stacks[0] if stacks else None,
            toolkit_stack,
            config.account,
            config.region,
            pipeline_account=pipeline_account,
        )

    def vpcs() -> Check:
        return evaluate_vpc_overlap(config, aws.paginate("ec2", "describe_vpcs", "Vpcs"))

    checks += _guarded("quotas", quotas)
    checks += _guarded("availability zones", zones)
    checks += _guarded(f"eks {config.eks.kubernetes_version}", kubernetes)
    # Each pinned add-on build against what EKS offers for the version (CreateAddon refuses
    # another after the cluster is up, and the stack rolls back).
    checks += _guarded(ADDONS_LABEL, addons)
    checks += _guarded("cdk bootstrap", bootstrap)
    checks += _guarded("vpc cidr overlap", vpcs)
    # The workloads image's base pinned by digest (read from the file; Docker Hub is not asked).
    checks.append(base_check(dockerfile))
    # network.images_from_ecr: the Docker Hub credential and each pull-through cache rule. Before
    # the first deploy the rules do not exist yet (WARN); run preflight again after the cluster
    # stack and before the HyperPod stack, when every rule must validate.
    checks += image_checks(config, aws, missing_rule_is=WARN)
    return checks


def exit_status(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0
