"""Rules across sections run when the config is loaded (so `cdk synth` reports them), and the
small faults of issue 18 found in the config."""

from __future__ import annotations

from config import parse_environment
from config.environment import CROSS_CHECKS
from manifests.check import parse_checked
from tests.config.config_data import config_errors as errors_of
from tests.config.config_data import env_data as data_of


def test_training_group_that_does_not_exist_fails_at_load():
    # Fault 18.10: found only by `python -m manifests render` before.
    assert errors_of("dev", lambda d: d["training"].update(instance_group="no-such-group")) == [
        "training.instance_group: 'no-such-group' is not a HyperPod instance group; known: gpu-workers"
    ]


def test_too_many_training_workers_fail_at_load():
    assert errors_of("dev", lambda d: d["training"].update(num_workers=64)) == [
        "training.num_workers: 64 workers need 16 ml.g5.12xlarge instances (4 per instance), but "
        "instance group 'gpu-workers' has 2"
    ]


def test_training_and_inference_mistakes_are_reported_together():
    def mutate(d):
        d["training"]["instance_group"] = "no-such-group"
        d["inference"]["instance_group"] = "other"

    errors = errors_of("dev", mutate)
    assert [e.split(":")[0] for e in errors] == ["training.instance_group", "inference.instance_group"]


def test_a_preset_larger_than_the_gpu_memory_fails_at_load():
    # dev trains on 2 A10G of gpu-workers: 11.01e9 parameters x 16 bytes (fp32 weights, gradients
    # and AdamW's two moments) / 2 shards is 82.0 GiB per GPU before activations.
    assert errors_of("dev", lambda d: d["training"].update(model={"preset": "llama-11b"})) == [
        "training.model: llama-11b (11.01B parameters) needs about 101.3 GiB per GPU with fsdp over "
        "2 workers (batch_size_per_worker 16, block_size 2048, activation_checkpointing full), but "
        "ml.g5.12xlarge has 24 GiB per A10G (85% usable: 20.4 GiB); allowed: a smaller preset, more "
        "workers with fsdp, a smaller batch"
    ]
    parse_checked({**data_of("dev"), "training": {**data_of("dev")["training"], "model": {"preset": "llama-1b"}}})


def test_fsdp_over_one_worker_fails_at_load():
    assert errors_of("dev", lambda d: d["training"].update(num_workers=1)) == [
        "training.sharding: 'fsdp' with 1 worker shards nothing; allowed: 'ddp' with one worker, or "
        "'fsdp' with 2 or more workers"
    ]


def test_every_cross_section_rule_is_one_function_of_the_environment():
    env = parse_environment(data_of("prod"))
    assert all(check(env) == [] for check in CROSS_CHECKS)


def test_tag_value_over_256_characters():
    # Fault 18.11a: CloudFormation accepted it at synth; tagging failed at deploy.
    assert errors_of("dev", lambda d: d["tags"].update(Owner="x" * 257)) == [
        "tags.Owner: the value is 257 characters; AWS allows at most 256 in a tag value"
    ]


def test_tag_key_over_128_characters_and_reserved_prefix():
    def mutate(d):
        d["tags"]["Extra"] = {"k" * 129: "v", "aws:team": "ml"}

    assert errors_of("dev", mutate) == [
        "tags.aws:team: keys starting with 'aws:' are reserved by AWS",
        f"tags.{'k' * 40}: the key is 129 characters; AWS allows 1-128",
    ]


def test_tag_value_of_256_characters_is_allowed():
    data = data_of("dev")
    data["tags"]["Owner"] = "o" * 256
    assert parse_environment(data).tags.owner == "o" * 256


def test_tag_characters_aws_refuses():
    assert errors_of("dev", lambda d: d["tags"].update(Owner="ml#platform")) == [
        "tags.Owner: the value 'ml#platform' has characters AWS does not allow in tags; allowed: "
        "letters, digits, spaces and + - = . _ : / @"
    ]


def test_standard_provisioning_mode_is_refused_with_a_customer_managed_key():
    # Fault 18.6 (second half): HyperPod supports customer-managed EBS keys only in Continuous mode.
    assert errors_of("prod", lambda d: d["hyperpod"].update(node_provisioning_mode=None)) == [
        "hyperpod.node_provisioning_mode: null (the standard provisioning mode) is not allowed: the "
        "HyperPod EBS volumes are encrypted with the platform's customer-managed KMS key, which "
        "HyperPod supports only with NodeProvisioningMode Continuous; allowed: Continuous"
    ]
