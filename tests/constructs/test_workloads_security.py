"""The Ray namespace's NetworkPolicies and SecretProviderClass, applied by the cluster stack of
every environment: exactly what the workloads side renders, after what they need."""

from __future__ import annotations

import json

import pytest

from config import load_environment
from tests.conftest import template_of
from workloads.common import network_policy, security

ENVS = ("dev", "staging", "prod")


def manifests(template: dict) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}


def applied(resource: dict) -> list[dict]:
    """The objects a manifest resource applies, less the prune label aws-cdk-lib adds to each."""
    body = resource["Properties"]["Manifest"]
    assert isinstance(body, str), "the manifest must be literal: no token, no deploy-time value in it"
    docs = json.loads(body)
    for doc in docs:
        labels = doc["metadata"]["labels"]
        for key in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:
            del labels[key]
    return docs


@pytest.mark.parametrize("env", ENVS)
def test_network_policies_and_secret_provider_class_are_applied(env, synthesized):
    _, config, stacks = synthesized(env)
    cluster = stacks.cluster
    res = template_of(cluster).to_json()["Resources"]
    sec = cluster.workloads_security
    policies_id = cluster.get_logical_id(sec.network_policies.node.default_child)
    assert applied(res[policies_id]) == network_policy.render(config)["items"]
    assert cluster.get_logical_id(cluster.workloads.namespace.node.default_child) in res[policies_id]["DependsOn"]

    assert config.eks.ray_token_auth and sec.secret_provider_class is not None
    spc_id = cluster.get_logical_id(sec.secret_provider_class.node.default_child)
    (spc,) = applied(res[spc_id])
    assert spc == security.render_secret_provider_class(config)
    objects = json.loads(spc["spec"]["parameters"]["objects"])
    assert [o["objectName"] for o in objects] == [f"{config.name_prefix}/ray-auth-token"]
    assert spc["spec"]["parameters"]["region"] == config.region
    # The CRD comes with the add-on; the secret and the Pod Identity that reads it come first.
    deps = set(res[spc_id]["DependsOn"])
    assert {
        cluster.get_logical_id(cluster.eks.addons["aws-secrets-store-csi-driver-provider"]),
        cluster.get_logical_id(cluster.workloads.namespace.node.default_child),
        cluster.get_logical_id(cluster.workloads.pod_identity),
        cluster.get_logical_id(cluster.ray_auth.secret.node.default_child),
    } <= deps


def test_without_token_auth_no_driver_and_no_secret_provider_class(tmp_path):
    """The switch off: no add-on, nothing to sync, the NetworkPolicies still fence the namespace."""
    import aws_cdk as cdk

    from app import APP_PROPS, build_app
    from tests.conftest import cdk_context

    config = load_environment("dev")
    config = config.model_copy(update={"eks": config.eks.model_copy(update={"ray_token_auth": False})})
    app = cdk.App(
        context={**APP_PROPS["context"], **cdk_context(), "env": "dev"},
        outdir=str(tmp_path),
        **{k: v for k, v in APP_PROPS.items() if k != "context"},
    )
    stacks = build_app(app, config)
    template = template_of(stacks.cluster).to_json()
    addons = {r["Properties"]["AddonName"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Addon"}
    assert "aws-secrets-store-csi-driver-provider" not in addons
    assert stacks.cluster.workloads_security.secret_provider_class is None
    assert "SecretProviderClass" not in json.dumps(manifests(template))
    policies = stacks.cluster.get_logical_id(stacks.cluster.workloads_security.network_policies.node.default_child)
    assert applied(template["Resources"][policies]) == network_policy.render(config)["items"]


def test_secret_provider_class_needs_a_driver():
    from aws_cdk import App, Stack
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_eks_v2 as eks

    from constructs.eks_cluster import kubectl_layer
    from constructs.workloads_security import WorkloadsSecurity

    stack = Stack(App(), "S", env={"account": "111111111111", "region": "us-west-2"})
    vpc = ec2.Vpc(stack, "V")
    cluster = eks.Cluster(
        stack,
        "C",
        version=eks.KubernetesVersion.V1_33,
        vpc=vpc,
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=kubectl_layer(stack, "1.33")),
    )
    namespace = eks.KubernetesManifest(stack, "Ns", cluster=cluster, manifest=[{"kind": "Namespace"}])
    with pytest.raises(ValueError) as err:
        WorkloadsSecurity(
            stack, "W", cluster=cluster, config=load_environment("dev"), namespace=namespace, secrets_store=None
        )
    assert str(err.value) == "1 secret(s) to sync into the Ray namespace but no Secrets Store CSI driver add-on"
