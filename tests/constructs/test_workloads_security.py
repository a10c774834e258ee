"""The Ray namespace's NetworkPolicies and SecretProviderClass, applied by the cluster stack of
every environment: exactly what the workloads side renders, after what they need."""

from __future__ import annotations

import json

import pytest

from config import load_environment
from manifests import disruption_budgets, ha, network_policy, security
from tests.conftest import template_of

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


@pytest.mark.parametrize("env", ENVS)
def test_gcs_store_secret_provider_class_and_budgets_are_applied_after_what_they_need(env, synthesized):
    """GCS fault tolerance: the heads' SecretProviderClass comes after the driver, the namespace,
    the store's token and what reads it; the budgets after the namespace only, not after the
    nodes (the cluster's readiness is not theirs to wait for)."""
    import aws_cdk as cdk

    _, config, stacks = synthesized(env)
    cluster = stacks.cluster
    res = template_of(cluster).to_json()["Resources"]
    sec = cluster.workloads_security
    assert config.gcs_fault_tolerance and cluster.gcs_store is not None
    assert sec.gcs_store_secret_provider_class is not None and sec.disruption_budgets is not None

    def resources(*constructs) -> set[str]:
        """The logical IDs of every CloudFormation resource in ``constructs`` (what a construct
        dependency turns into), and of the barrier aws-cdk-lib puts before every manifest."""
        barrier = cluster.eks.cluster.node.find_child("KubectlReadyBarrier")
        return {
            cluster.get_logical_id(c)
            for x in (barrier, *constructs)
            for c in x.node.find_all()
            if isinstance(c, cdk.CfnResource)
        }

    spc_id = cluster.get_logical_id(sec.gcs_store_secret_provider_class.node.default_child)
    assert applied(res[spc_id]) == [ha.render_secret_provider_class(config)]
    assert set(res[spc_id]["DependsOn"]) == resources(
        cluster.eks.addons["aws-secrets-store-csi-driver-provider"],
        cluster.workloads.namespace,
        cluster.workloads.pod_identity,
        cluster.ray_auth.secret,
        cluster.gcs_store.secret,
    )
    budgets_id = cluster.get_logical_id(sec.disruption_budgets.node.default_child)
    assert applied(res[budgets_id]) == disruption_budgets.render_disruption_budgets(config)["items"]
    assert set(res[budgets_id]["DependsOn"]) == resources(cluster.workloads.namespace)


def _second_workloads_security(cluster, config) -> None:
    """A WorkloadsSecurity for ``config`` on a cluster stack already built, without a GCS store."""
    from constructs.workloads_security import WorkloadsSecurity, ray_namespace_manifests

    WorkloadsSecurity(
        cluster,
        "W",
        cluster=cluster.eks,
        manifests=ray_namespace_manifests(config),
        workloads=cluster.workloads,
        ray_auth=cluster.ray_auth,
    )


def test_the_rendered_manifests_follow_the_config_switches():
    """Token auth off: nothing to sync and no GCS fault tolerance (it needs the token); on: the
    same objects ``python -m manifests render`` prints."""
    from constructs.workloads_security import ray_namespace_manifests

    config = load_environment("dev")
    on = ray_namespace_manifests(config)
    assert on.network_policies == network_policy.render(config)["items"]
    assert [s.secret_name for s in on.synced_secrets] == [security.AUTH_SECRET]
    assert on.secret_provider_class == security.render_secret_provider_class(config)
    assert on.gcs_store_secret_provider_class == ha.render_secret_provider_class(config)
    assert on.disruption_budgets == disruption_budgets.render_disruption_budgets(config)["items"] != []
    off = ray_namespace_manifests(
        config.model_copy(update={"eks": config.eks.model_copy(update={"ray_token_auth": False})})
    )
    assert (off.synced_secrets, off.secret_provider_class) == ((), None)
    assert (off.gcs_store_secret_provider_class, off.disruption_budgets) == (None, [])


def test_secret_provider_class_needs_a_driver(tmp_path):
    """A cluster built without the driver (token auth off) and a config with a secret to sync:
    one clear error before anything is applied."""
    import aws_cdk as cdk

    from app import APP_PROPS, build_app
    from tests.conftest import cdk_context

    config = load_environment("dev")
    without = config.model_copy(update={"eks": config.eks.model_copy(update={"ray_token_auth": False})})
    app = cdk.App(
        context={**APP_PROPS["context"], **cdk_context(), "env": "dev"},
        outdir=str(tmp_path),
        **{k: v for k, v in APP_PROPS.items() if k != "context"},
    )
    cluster = build_app(app, without).cluster
    assert "aws-secrets-store-csi-driver-provider" not in cluster.eks.addons
    with pytest.raises(ValueError) as err:
        _second_workloads_security(cluster, config)
    assert str(err.value) == "1 secret(s) to sync into the Ray namespace but no Secrets Store CSI driver add-on"


def test_gcs_fault_tolerance_needs_the_store(tmp_path):
    from tests.conftest import make_app

    _, config, stacks = make_app("dev", tmp_path)
    cluster = stacks.cluster
    assert config.gcs_fault_tolerance
    with pytest.raises(ValueError) as err:
        _second_workloads_security(cluster, config)
    assert str(err.value) == "GCS fault tolerance needs the Secrets Store CSI driver add-on and the store's secret"
