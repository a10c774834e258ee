from __future__ import annotations

from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match

from config.facts.names import ray_auth_secret_name
from constructs.ray_auth import RayAuthToken
from manifests import security
from tests.conftest import template_of


def synth():
    stack = Stack(App(), "T", env={"account": "111111111111", "region": "us-east-1"})
    key = kms.Key(stack, "Key")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    RayAuthToken(stack, "RayAuth", name_prefix="hpray-dev", key=key, readers=[role])
    return template_of(stack)


def test_generated_token_encrypted_with_the_platform_key_and_deleted_with_the_stack():
    """Not retained (issue 41): a retained token kept its fixed name and the next deploy with the
    same prefix failed on it; a redeploy generates a new token."""
    t = synth()
    t.has_resource(
        "AWS::SecretsManager::Secret",
        {
            "Properties": {
                "Name": "hpray-dev/ray-auth-token",
                "KmsKeyId": Match.any_value(),
                "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True, "IncludeSpace": False},
            },
            "DeletionPolicy": "Delete",
        },
    )
    # No value in the template: the secret has no SecretString.
    for res in t.find_resources("AWS::SecretsManager::Secret").values():
        assert "SecretString" not in res["Properties"]


def test_only_the_reader_role_may_read_it():
    t = synth()
    policies = t.find_resources("AWS::IAM::Policy")
    statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    secret_id = next(iter(t.find_resources("AWS::SecretsManager::Secret")))
    read, decrypt = statements
    assert (read["Sid"], decrypt["Sid"]) == ("ReadRayAuthToken", "DecryptRayAuthToken")
    assert sorted(read["Action"]) == ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]
    assert read["Resource"] == {"Ref": secret_id}
    # The key only through Secrets Manager, and only for this secret.
    assert decrypt["Action"] == "kms:Decrypt"
    assert decrypt["Condition"] == {
        "StringEquals": {
            "kms:ViaService": "secretsmanager.us-east-1.amazonaws.com",
            "kms:EncryptionContext:SecretARN": {"Ref": secret_id},
        }
    }


def test_a_key_of_another_stack_makes_no_dependency_cycle():
    """The platform key lives in the storage stack: the reader is granted in its identity policy,
    never named in the key policy (which would make the key's stack depend on the reader's)."""
    app = App()
    env = {"account": "111111111111", "region": "us-east-1"}
    storage = Stack(app, "Storage", env=env)
    key = kms.Key(storage, "Key")
    cluster = Stack(app, "Cluster", env=env)
    role = iam.Role(cluster, "Role", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    RayAuthToken(cluster, "RayAuth", name_prefix="hpray-dev", key=key, readers=[role])
    key_policy = template_of(storage).find_resources("AWS::KMS::Key")
    assert "Role" not in str(key_policy)
    decrypt = [
        s
        for p in template_of(cluster).find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "kms:Decrypt"
    ]
    assert "Fn::ImportValue" in str(decrypt[0]["Resource"])


def test_the_name_is_the_one_the_secret_provider_class_syncs():
    assert ray_auth_secret_name("hpray-dev") == security.secrets_manager_secret_name("hpray-dev")
