"""ECR as the only image source (``network.images_from_ecr``).

- One pull-through cache rule per upstream in ``config.versions.PULL_THROUGH_CACHES``: quay.io
  (the KubeRay operator) and Docker Hub (the Ray Serve LLM image). The first pull of an image
  through a rule creates its repository and imports the image; later pulls come from ECR.
- Docker Hub requires credentials: the Secrets Manager secret the operator names in
  ``network.docker_hub_credential_secret_arn`` (its name starts with ``ecr-pullthroughcache/``, the
  prefix ECR requires; its value is ``{"username": ..., "accessToken": ...}``). It is imported,
  never created here, so no placeholder and no credential is ever in a template; ``ops preflight``
  checks it and the rule before the HyperPod stack. Without that secret (no Docker Hub image is
  used: the LLM service is off) there is no Docker Hub rule.
- The NVIDIA device plugin is only on nvcr.io, which ECR cannot cache: it is a CDK image asset
  instead (constructs/device_plugin_image.py), not a repository here.
- The node roles that pull through a rule get ``ecr:BatchImportUpstreamImage`` and
  ``ecr:CreateRepository`` on the rule's repositories (ECR user guide, "IAM permissions required
  to sync an upstream registry").
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from config import versions
from constructs.compliance import acknowledge
from constructs.lifecycle_scripts import nag_env


class ImageCache(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pullers: list[iam.IGrantable],
        docker_hub_credential: secretsmanager.ISecret | None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.rules: dict[str, ecr.CfnPullThroughCacheRule] = {}
        self.credentials: dict[str, secretsmanager.ISecret] = {}
        for cache in versions.PULL_THROUGH_CACHES:
            credential_arn = None
            if cache.needs_credentials:
                if docker_hub_credential is None:
                    continue  # no image of this environment comes from that registry
                self.credentials[cache.prefix] = docker_hub_credential
                credential_arn = docker_hub_credential.secret_arn
            self.rules[cache.prefix] = ecr.CfnPullThroughCacheRule(
                self,
                f"{cache.prefix}-rule",
                ecr_repository_prefix=cache.prefix,
                upstream_registry_url=cache.upstream_url,
                upstream_registry=cache.upstream_registry,
                credential_arn=credential_arn,
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
