"""The Ray clusters' authentication token: a Secrets Manager secret with a value Secrets Manager
generates, encrypted with the platform key, readable by the Ray workloads' Pod Identity role only.

In the cluster, the Secrets Store CSI driver with the AWS provider (ASCP) syncs it into the
Kubernetes Secret that KubeRay's ``authOptions.secretName`` names (workloads/common/security.py
renders the SecretProviderClass and the pods' CSI volume). The value never passes through a
template or the kubectl handler: CloudFormation holds only the generator settings, and the
kubectl handler (which prints every event it gets to its log) never sees it.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from config.names import ray_auth_secret_name
from constructs.compliance import acknowledge

TOKEN_LENGTH = 64


class RayAuthToken(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        key: kms.IKey,
        readers: list[iam.IGrantable],
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            secret_name=ray_auth_secret_name(name_prefix),
            description="Ray token authentication (RAY_AUTH_TOKEN) of every Ray cluster on the platform",
            encryption_key=key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=TOKEN_LENGTH, exclude_punctuation=True, include_space=False
            ),
            removal_policy=removal_policy,
        )
        self.key = key
        for reader in readers:
            self.grant_read(reader)
        acknowledge(
            self.secret,
            (
                "AwsSolutions-SMG4",
                "Ray reads the token once at process start; a rotation is a planned restart of the Ray clusters, not a Lambda on a schedule.",
            ),
            (
                "NIST.800.53.R5-SecretsManagerRotationEnabled",
                "Ray reads the token once at process start; a rotation is a planned restart of the Ray clusters.",
            ),
        )

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """GetSecretValue on the secret, and kms:Decrypt of its key only through Secrets Manager
        and only for this secret (``grant_secret_read``)."""
        grant_secret_read(grantee, secret=self.secret, key=self.key, sid="RayAuthToken")


def grant_secret_read(grantee: iam.IGrantable, *, secret: secretsmanager.ISecret, key: kms.IKey, sid: str) -> None:
    """GetSecretValue on ``secret``, and kms:Decrypt of ``key`` only through Secrets Manager and only
    for this secret, both in the grantee's identity policy (statements ``Read<sid>``,
    ``Decrypt<sid>``). ``Secret.grant_read`` would name the grantee in the key policy, and the key
    belongs to the storage stack: the two stacks would then reference each other. The key policy
    delegates to the account, so an identity policy is enough."""
    principal = grantee.grant_principal
    principal.add_to_principal_policy(
        iam.PolicyStatement(
            sid=f"Read{sid}",
            actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            resources=[secret.secret_arn],
        )
    )
    principal.add_to_principal_policy(
        iam.PolicyStatement(
            sid=f"Decrypt{sid}",
            actions=["kms:Decrypt"],
            resources=[key.key_arn],
            conditions={
                "StringEquals": {
                    "kms:ViaService": f"secretsmanager.{Stack.of(secret).region}.amazonaws.com",
                    "kms:EncryptionContext:SecretARN": secret.secret_arn,
                }
            },
        )
    )
