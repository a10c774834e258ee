"""ECR as the only image source (``network.images_from_ecr``).

- One pull-through cache rule per upstream in ``config.versions.PULL_THROUGH_CACHES``: quay.io
  (the KubeRay operator) and Docker Hub (the Ray Serve LLM image). The first pull of an image
  through a rule creates its repository and imports the image; later pulls come from ECR.
- Docker Hub requires credentials: a Secrets Manager secret named ``ecr-pullthroughcache/...``
  (the prefix ECR requires) that this construct creates with a placeholder; operators put the
  Docker Hub user name and access token into it (docs/security.md), so no credential is ever in a
  template.
- The NVIDIA device plugin is only on nvcr.io, which ECR cannot cache: a private repository that
  the pinned tag is copied into.
- The node roles that pull through a rule get ``ecr:BatchImportUpstreamImage`` and
  ``ecr:CreateRepository`` on the rule's repositories (ECR user guide, "IAM permissions required
  to sync an upstream registry").
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from config import versions
from constructs.compliance import acknowledge, checkov_skip
from constructs.lifecycle_scripts import nag_env


class ImageCache(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        pullers: list[iam.IGrantable],
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.rules: dict[str, ecr.CfnPullThroughCacheRule] = {}
        self.credentials: dict[str, secretsmanager.Secret] = {}
        for cache in versions.PULL_THROUGH_CACHES:
            credential_arn = None
            if cache.needs_credentials:
                secret = secretsmanager.Secret(
                    self,
                    f"{cache.prefix}-credentials",
                    secret_name=f"ecr-pullthroughcache/{name_prefix}-{cache.prefix}",
                    description=f"{cache.upstream_url} credentials of the ECR pull-through cache "
                    '({"username": ..., "accessToken": ...}); set by operators, never in a template',
                    removal_policy=removal_policy,
                )
                acknowledge(
                    secret,
                    ("AwsSolutions-SMG4", "A registry access token is rotated at the registry, then put here."),
                    ("NIST.800.53.R5-SecretsManagerRotationEnabled", "Rotated at the registry, then put here."),
                    (
                        "NIST.800.53.R5-SecretsManagerUsingKMSKey",
                        "ECR's pull-through cache reads it with its service-linked role, which decrypts "
                        "with the AWS managed key only.",
                    ),
                )
                checkov_skip(
                    secret,
                    "CKV_AWS_149",
                    "ECR's pull-through cache service-linked role decrypts with the AWS managed key only.",
                )
                self.credentials[cache.prefix] = secret
                credential_arn = secret.secret_arn
            self.rules[cache.prefix] = ecr.CfnPullThroughCacheRule(
                self,
                f"{cache.prefix}-rule",
                ecr_repository_prefix=cache.prefix,
                upstream_registry_url=cache.upstream_url,
                upstream_registry=cache.upstream_registry,
                credential_arn=credential_arn,
            )
        self.nvidia_mirror = ecr.Repository(
            self,
            "NvidiaDevicePluginMirror",
            repository_name=versions.NVIDIA_DEVICE_PLUGIN_MIRROR,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS,  # the AWS managed key: nodes need no key grant
            removal_policy=removal_policy,
        )
        partition, region, account = nag_env(stack)
        for puller in pullers:
            puller.grant_principal.add_to_principal_policy(pull_through_import_statement(stack))
            policy = puller.grant_principal.node.try_find_child("DefaultPolicy")  # type: ignore[attr-defined]
            if policy is not None:
                acknowledge(
                    policy,
                    *pull_through_acknowledgements(partition, region, account),
                    (
                        "NIST.800.53.R5-IAMNoInlinePolicy",
                        "One statement that belongs to this node role only: the pull-through import "
                        "on this account's cache prefixes, versioned with the cache rules.",
                    ),
                )


def pull_through_import_statement(stack: Stack) -> iam.PolicyStatement:
    """What pulling an image through a rule for the first time takes, on the rules' repositories."""
    return iam.PolicyStatement(
        sid="PullThroughCacheImport",
        actions=["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
        resources=[
            stack.format_arn(service="ecr", resource="repository", resource_name=f"{cache.prefix}/*")
            for cache in versions.PULL_THROUGH_CACHES
        ],
    )


def pull_through_acknowledgements(partition: str, region: str, account: str) -> list[tuple[str, str]]:
    return [
        (
            f"AwsSolutions-IAM5[Resource::arn:{partition}:ecr:{region}:{account}:repository/{cache.prefix}/*]",
            "The pull-through cache creates one repository per upstream image on its first pull; the "
            "prefix of the rule is all that is known before.",
        )
        for cache in versions.PULL_THROUGH_CACHES
    ]
