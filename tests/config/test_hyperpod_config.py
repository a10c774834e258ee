"""HyperPod section of the environment config: defaults, and every invalid value with its exact
message (through parse_environment / ConfigError, as `cdk synth` reports them)."""

from __future__ import annotations

import copy
from functools import partial

import pytest
from pydantic import ValidationError

from config import load_environment, parse_environment
from config.catalog import botocore_version, hyperpod_instance_types
from tests.config.config_data import config_errors, env_data

prod_data = partial(env_data, "prod")
errors_of = partial(config_errors, "prod")


def groups(data: dict) -> list[dict]:
    return data["hyperpod"]["instance_groups"]


def test_instance_type_outside_botocore_enum():
    n = len(hyperpod_instance_types())
    assert errors_of(lambda d: groups(d)[0].update(instance_type="ml.p5.48xl")) == [
        "hyperpod.instance_groups[0].instance_type: 'ml.p5.48xl' is not a HyperPod instance type "
        f"(botocore {botocore_version()} sagemaker ClusterInstanceType enum, {n} values); "
        "did you mean 'ml.p5.48xlarge'?"
    ]


def test_instance_type_list_is_botocores_own():
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    assert hyperpod_instance_types() == tuple(model.shape_for("ClusterInstanceType").enum)


def test_duplicate_group_names():
    assert errors_of(lambda d: groups(d)[1].update(name="train-p5")) == [
        "hyperpod.instance_groups: instance group names must be unique; repeated: train-p5"
    ]


def test_more_than_100_groups():
    def many(d):
        d["hyperpod"]["instance_groups"] = [dict(groups(d)[1], name=f"g{i}") for i in range(101)]

    assert errors_of(many) == [
        "hyperpod.instance_groups: 101 instance groups given; a HyperPod cluster allows at most 100"
    ]


def test_exactly_100_groups_is_valid():
    data = prod_data()
    data["hyperpod"]["instance_groups"] = [dict(groups(data)[1], name=f"g{i}") for i in range(100)]
    data["training"]["instance_group"] = "g0"  # checked at load time: it must name a group
    assert len(parse_environment(data).hyperpod.instance_groups) == 100


def test_threads_per_core_3():
    assert errors_of(lambda d: groups(d)[0].update(threads_per_core=3)) == [
        "hyperpod.instance_groups[0].threads_per_core: 3 threads per core is not allowed; "
        "allowed: 1 (multithreading off) or 2 (on)"
    ]


_NAME_RULE = (
    "the name must be 1-63 characters, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)
_VALUE_RULE = (
    "a value must be at most 63 characters, alphanumerics, '-', '_' or '.', starting and ending with an "
    "alphanumeric (or empty)"
)


def _taint(key: str, value: str | None, effect: str) -> list[dict]:
    return [{"key": key, "effect": effect} if value is None else {"key": key, "value": value, "effect": effect}]


# (environment, group index, field, value, the one error): label and taint keys and values follow
# Kubernetes' syntax, in every environment's groups.
@pytest.mark.parametrize(
    ("env", "group", "field", "value", "error"),
    [
        (
            "prod",
            0,
            "labels",
            {"bad key!": "x"},
            f"hyperpod.instance_groups[0].labels: label key 'bad key!' is not a valid Kubernetes key: {_NAME_RULE}",
        ),
        (
            "dev",
            0,
            "labels",
            {"bad key!": "x"},
            f"hyperpod.instance_groups[0].labels: label key 'bad key!' is not a valid Kubernetes key: {_NAME_RULE}",
        ),
        (
            "prod",
            0,
            "labels",
            {"workload": "ray train"},
            f"hyperpod.instance_groups[0].labels: label workload='ray train' has an invalid value: {_VALUE_RULE}",
        ),
        (
            "dev",
            0,
            "labels",
            {"team": "-x"},
            f"hyperpod.instance_groups[0].labels: label team='-x' has an invalid value: {_VALUE_RULE}",
        ),
        (
            "prod",
            0,
            "labels",
            {"Example.COM/team": "a"},
            "hyperpod.instance_groups[0].labels: label key 'Example.COM/team' is not a valid Kubernetes "
            "key: the prefix must be a DNS subdomain (lowercase alphanumerics, '-', '.'; <= 253 chars)",
        ),
        (
            "prod",
            1,
            "taints",
            _taint("-workload", "ray-serve", "NoSchedule"),
            "hyperpod.instance_groups[1].taints[0].key: taint key '-workload' is not a valid Kubernetes "
            f"key: {_NAME_RULE}",
        ),
        (
            "dev",
            0,
            "taints",
            _taint("example.com/", "x", "NoSchedule"),
            "hyperpod.instance_groups[0].taints[0].key: taint key 'example.com/' is not a valid "
            f"Kubernetes key: {_NAME_RULE}",
        ),
        (
            "prod",
            1,
            "taints",
            _taint("workload", "ray/serve", "NoSchedule"),
            f"hyperpod.instance_groups[1].taints[0].value: taint value 'ray/serve' is not valid: {_VALUE_RULE}",
        ),
        (
            "prod",
            1,
            "taints",
            _taint("workload", "ray-serve", "Sometimes"),
            "hyperpod.instance_groups[1].taints[0].effect: Input should be 'NoSchedule', "
            "'PreferNoSchedule' or 'NoExecute' (given: 'Sometimes')",
        ),
        (
            "dev",
            0,
            "taints",
            _taint("a", None, "Never"),
            "hyperpod.instance_groups[0].taints[0].effect: Input should be 'NoSchedule', "
            "'PreferNoSchedule' or 'NoExecute' (given: 'Never')",
        ),
    ],
)
def test_label_and_taint_syntax(env, group, field, value, error):
    assert config_errors(env, lambda d: d["hyperpod"]["instance_groups"][group].update({field: value})) == [error]


@pytest.mark.parametrize("gib", [0, 16385])
def test_ebs_outside_1_to_16384(gib):
    assert errors_of(lambda d: groups(d)[0].update(ebs_volume_gib=gib)) == [
        f"hyperpod.instance_groups[0].ebs_volume_gib: {gib} GiB is outside the HyperPod EBS volume "
        "size range; allowed: 1-16384 GiB"
    ]


@pytest.mark.parametrize("gib", [1, 16384])
def test_ebs_bounds_are_valid(gib):
    data = prod_data()
    groups(data)[0]["ebs_volume_gib"] = gib
    assert parse_environment(data).hyperpod.instance_groups[0].ebs_volume_gib == gib


def test_subnet_override_names_az_without_hyperpod_subnet():
    # use1-az1 is an AZ of the prod VPC, but prod has HyperPod subnets only in use1-az4 and use1-az6.
    assert errors_of(lambda d: groups(d)[0].update(subnet_az_id="use1-az1")) == [
        "hyperpod.instance_groups[0].subnet_az_id: 'use1-az1' has no HyperPod subnet; configured AZ "
        "IDs: use1-az4, use1-az6"
    ]


def test_subnet_override_malformed_az_id():
    assert errors_of(lambda d: groups(d)[0].update(subnet_az_id="us-east-1a")) == [
        "hyperpod.instance_groups[0].subnet_az_id: 'us-east-1a' is not an AZ ID; expected the form use1-az4"
    ]


def test_negative_instance_count():
    assert errors_of(lambda d: groups(d)[0].update(instance_count=-1)) == [
        "hyperpod.instance_groups[0].instance_count: Input should be greater than or equal to 0 (given: -1)"
    ]


def test_deep_health_checks_on_a_cpu_type():
    def cpu(d):
        groups(d)[1].update(instance_type="ml.m5.xlarge", deep_health_checks=["InstanceStress"])

    assert errors_of(cpu) == [
        "hyperpod.instance_groups[1]: deep_health_checks ['InstanceStress'] need a GPU or Trainium "
        "instance type; ml.m5.xlarge has neither (use [] or leave it unset)"
    ]


def test_unknown_node_provisioning_mode():
    assert errors_of(lambda d: d["hyperpod"].update(node_provisioning_mode="Eager")) == [
        "hyperpod.node_provisioning_mode: Input should be 'Continuous' (given: 'Eager')"
    ]


def test_several_mistakes_are_reported_together():
    def three(d):
        groups(d)[0].update(threads_per_core=3, ebs_volume_gib=0)
        groups(d)[1].update(instance_type="ml.g6e.12xl")

    assert [e.split(":")[0] for e in errors_of(three)] == [
        "hyperpod.instance_groups[0].threads_per_core",
        "hyperpod.instance_groups[0].ebs_volume_gib",
        "hyperpod.instance_groups[1].instance_type",
    ]


# Defaults ------------------------------------------------------------------------------------


def group_with(instance_type: str, **extra):
    data = prod_data()
    # Added beside prod's groups, which training and serving keep using.
    groups(data).append({"name": "g", "instance_type": instance_type, "instance_count": 1, **extra})
    return parse_environment(data).hyperpod.group("g")


def test_deep_health_checks_default_by_instance_type():
    # GPU with EFA: both checks; GPU without EFA: stress only; CPU: none.
    assert group_with("ml.p5.48xlarge").effective_deep_health_checks == ["InstanceStress", "InstanceConnectivity"]
    assert group_with("ml.g5.xlarge").effective_deep_health_checks == ["InstanceStress"]
    assert group_with("ml.m5.xlarge").effective_deep_health_checks == []
    assert group_with("ml.p5.48xlarge", deep_health_checks=[]).effective_deep_health_checks == []


def test_cpu_type_without_catalog_facts_is_accepted():
    # A valid ClusterInstanceType the hardware catalog has no facts for must not crash synth.
    valid = [t for t in hyperpod_instance_types() if t.startswith("ml.c6a.")]
    assert valid, "botocore lists no ml.c6a types"
    assert group_with(valid[0]).effective_deep_health_checks == []


def test_group_defaults_with_reasons():
    g = group_with("ml.g6e.12xlarge")
    assert (g.threads_per_core, g.ebs_volume_gib, g.labels, g.taints, g.subnet_az_id, g.training_plan_arn) == (
        1,
        500,
        {},
        [],
        None,
        None,
    )
    hp = load_environment("dev").hyperpod
    assert (hp.node_recovery, hp.node_provisioning_mode) == ("Automatic", "Continuous")


def test_prod_has_at_least_two_gpu_groups():
    gpu = [g for g in load_environment("prod").hyperpod.instance_groups if g.is_gpu]
    assert [(g.name, g.instance_type) for g in gpu] == [
        ("train-p5", "ml.p5.48xlarge"),
        ("serve-g6e", "ml.g6e.12xlarge"),
    ]


def test_every_environment_loads():
    for env in ("dev", "staging", "prod"):
        assert load_environment(env).hyperpod.instance_groups


def test_config_is_frozen():
    hp = load_environment("dev").hyperpod
    with pytest.raises(ValidationError):
        hp.instance_groups[0].instance_count = 3  # type: ignore[misc]
    assert copy.deepcopy(hp) == hp
