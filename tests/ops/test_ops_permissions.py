"""The documented IAM actions are exactly the calls the commands make (recorded on the session)."""

from __future__ import annotations

import boto3
import pytest

from config.facts import permissions
from ops.clients.aws import Aws
from ops.reports.preflight import run_preflight
from ops.reports.status import gather
from tests.ops.fakes import REGION, create_bootstrap_stack, quota, stub_eks_versions, stub_quotas


def recording_aws():
    calls = []
    session = boto3.Session(region_name=REGION)

    def record(model, **kwargs):
        action = f"{model.service_model.signing_name}:{model.name}"
        if action not in calls:
            calls.append(action)

    # before-parameter-build fires for every call, stubbed ones too (the stubs answer later, at
    # before-call).
    session.events.register("before-parameter-build", record)
    return Aws(REGION, session=session), calls


@pytest.fixture(scope="module")
def deployed(shared_moto):
    from config import parse_environment
    from tests.ops.fakes import healthy_data
    from tests.ops.reports.test_ops_status import deploy_to_moto

    create_bootstrap_stack()
    deploy_to_moto(parse_environment(healthy_data()))


def test_preflight_calls_exactly_the_documented_actions(deployed, healthy_config):
    aws, calls = recording_aws()
    stub_quotas(aws, applied=[quota("ml.g5.12xlarge", 4, "L-1")], defaults=[])
    stub_eks_versions(aws)
    run_preflight(healthy_config, aws)
    assert tuple(calls) == permissions.PREFLIGHT


def test_status_calls_exactly_the_documented_actions(deployed, healthy_config):
    from tests.ops.reports.test_ops_status import stub_fsx

    aws, calls = recording_aws()
    stub_fsx(aws)

    def no_kube():
        from ops.errors import KubernetesError

        raise KubernetesError("not in this test")

    gather(healthy_config, aws, no_kube)
    assert tuple(calls) == permissions.STATUS


def test_dashboard_reads_the_token_from_its_secret_with_the_documented_actions(shared_moto):
    """With token auth the dashboard's token comes from the platform's Secrets Manager secret
    (moto here); the AWS actions it adds are the documented ones (kms:Decrypt is Secrets
    Manager's own call on the caller's behalf, so no client call records it)."""
    from config.facts.names import ray_auth_secret_name
    from ops.clients import ray_head

    secret = ray_auth_secret_name("hpray-dashboard-test")
    boto3.client("secretsmanager", region_name=REGION).create_secret(Name=secret, SecretString="t0ken")
    head = {
        "spec": {
            "containers": [
                {
                    "env": [
                        {"name": "RAY_AUTH_MODE", "value": "token"},
                        {
                            "name": "RAY_AUTH_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "ray-auth-token", "key": "auth_token"}},
                        },
                    ]
                }
            ]
        }
    }

    class NoSecretsRead:
        def read_secret_value(self, *args):
            raise AssertionError("the Kubernetes Secret is not read when Secrets Manager is")

    aws, calls = recording_aws()
    assert ray_head.auth_token(NoSecretsRead(), "ray-workloads", head, aws=aws, secret_id=secret) == "t0ken"
    assert calls == ["secretsmanager:GetSecretValue"]
    assert set(calls) | {"eks:DescribeCluster", "kms:Decrypt"} == set(permissions.DASHBOARD)
    # Token auth off on the head: nothing is read.
    aws, calls = recording_aws()
    assert (
        ray_head.auth_token(NoSecretsRead(), "ray-workloads", {"spec": {"containers": [{}]}}, aws=aws, secret_id=secret)
        is None
    )
    assert calls == []
