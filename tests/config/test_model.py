"""The environment config model: every validation rule, with its exact message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from config import ConfigError, catalog, known_environments, load_environment, parse_environment
from tests.config.config_data import config_errors, env_data

ROOT = Path(__file__).resolve().parents[2]


dev_data = partial(env_data, "dev")
errors_for = partial(config_errors, "dev")


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_every_shipped_environment_is_valid(name):
    config = load_environment(name)
    assert config.name == name
    assert config.model_config["frozen"] and config.model_config["extra"] == "forbid"


def test_at_least_three_environments():
    assert {"dev", "staging", "prod"} <= set(known_environments())


def test_unknown_environment_lists_the_known_ones():
    with pytest.raises(ConfigError) as info:
        load_environment("qa")
    assert info.value.errors == ["unknown environment 'qa'; known environments: dev, prod, staging"]


def test_config_is_frozen():
    config = load_environment("dev")
    with pytest.raises(Exception, match="frozen"):
        config.region = "eu-west-1"  # type: ignore[misc]


def test_unknown_key_suggests_the_closest():
    errs = errors_for(lambda d: d["network"].update(aws_interface_endpoint=True))
    assert errs == [
        "network.aws_interface_endpoint: unknown key 'aws_interface_endpoint'; did you mean 'aws_interface_endpoints'?"
    ]


def test_a_renamed_key_names_its_new_name():
    def rename(d):
        d["network"]["closed_network"] = d["network"].pop("aws_interface_endpoints")

    assert errors_for(rename) == [
        "network.closed_network: renamed to 'aws_interface_endpoints'; it adds interface endpoints for the AWS "
        "APIs and never closed egress to the internet (NAT stays); pulling images only from ECR is "
        "network.images_from_ecr"
    ]


def test_a_removed_key_says_what_does_its_work_now():
    errs = errors_for(lambda d: d.setdefault("training", {}).update(submitter_backoff_limit=2))
    assert errs == [
        "training.submitter_backoff_limit: removed; every RayJob runs in HTTPMode, with no submitter pod to "
        "retry (backoffLimit 0); a training run's retries are training.max_failures"
    ]


def test_unknown_top_level_key_suggests_the_closest():
    errs = errors_for(lambda d: d.update(hyperpd={}))
    assert errs == ["hyperpd: unknown key 'hyperpd'; did you mean 'hyperpod'?"]


def test_cidr_syntax():
    errs = errors_for(lambda d: d["network"].update(vpc_cidr="10.10.0.0/33"))
    assert errs == [
        "network.vpc_cidr: '10.10.0.0/33' is not a valid IPv4 CIDR block ('33' is not a valid "
        "netmask); expected network/prefix, e.g. 10.0.0.0/16, with no host bits set"
    ]


def test_cidr_with_host_bits():
    errs = errors_for(lambda d: d["network"].update(vpc_cidr="10.10.0.1/16"))
    assert errs == [
        "network.vpc_cidr: '10.10.0.1/16' is not a valid IPv4 CIDR block (10.10.0.1/16 has host "
        "bits set); expected network/prefix, e.g. 10.0.0.0/16, with no host bits set"
    ]


def test_overlapping_cidrs():
    errs = errors_for(
        lambda d: d["network"].update(
            hyperpod_cidr_blocks=["10.10.128.0/17"], hyperpod_subnets=[{"az_id": "use1-az4", "cidr": "10.10.128.0/18"}]
        )
    )
    assert errs == [
        "network.vpc_cidr 10.10.0.0/16 overlaps network.hyperpod_cidr_blocks[0] 10.10.128.0/17; "
        "CIDR blocks of one VPC must not overlap"
    ]


def test_hyperpod_subnet_outside_its_block():
    errs = errors_for(lambda d: d["network"]["hyperpod_subnets"][0].update(cidr="10.12.0.0/17"))
    assert errs == [
        "network.hyperpod_subnets[0].cidr 10.12.0.0/17 is not inside any of network.hyperpod_cidr_blocks (10.11.0.0/16)"
    ]


def test_subnets_do_not_fit_in_the_vpc():
    errs = errors_for(lambda d: d["network"].update(vpc_cidr="10.10.0.0/20"))
    assert errs == [
        "network.vpc_cidr 10.10.0.0/20 has 4096 addresses but 2 AZs of /24 public and /20 private subnets need 8704"
    ]


def test_hyperpod_subnet_in_an_az_outside_the_vpc():
    errs = errors_for(lambda d: d["network"]["hyperpod_subnets"][0].update(az_id="use1-az1"))
    assert errs == [
        "network.hyperpod_subnets[0].az_id: 'use1-az1' is not one of the VPC's AZs (network.availability_zones: "
        "use1-az4, use1-az6); a HyperPod subnet routes through the NAT gateway of its own AZ, so its AZ must be one of them"
    ]


def test_az_id_format():
    errs = errors_for(lambda d: d["network"]["hyperpod_subnets"][0].update(az_id="us-east-1a"))
    assert errs == ["network.hyperpod_subnets[0].az_id: 'us-east-1a' is not an AZ ID; expected the form use1-az4"]


def test_instance_type_from_botocore_enum():
    errs = errors_for(lambda d: d["hyperpod"]["instance_groups"][0].update(instance_type="ml.g5.13xlarge"))
    n = len(catalog.hyperpod_instance_types())
    assert errs == [
        f"hyperpod.instance_groups[0].instance_type: 'ml.g5.13xlarge' is not a HyperPod instance "
        f"type (botocore {catalog.botocore_version()} sagemaker ClusterInstanceType enum, {n} "
        "values); did you mean 'ml.g5.16xlarge'?"
    ]


def test_instance_types_are_read_from_botocore():
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    assert catalog.hyperpod_instance_types() == tuple(model.shape_for("ClusterInstanceType").enum)
    assert "ml.p5.48xlarge" in catalog.hyperpod_instance_types()
    ec2 = botocore.session.get_session().get_service_model("ec2")
    assert catalog.ec2_instance_types() == tuple(ec2.shape_for("InstanceType").enum)


def test_service_enum_reads_any_layout_of_the_newest_model(tmp_path, monkeypatch):
    """The fast path reads one shape; a model laid out otherwise is parsed whole, and the newest
    API version wins, as in botocore's loader."""
    import gzip
    import json

    for version, values in (("2016-01-01", ["old"]), ("2024-01-01", ["b", "a"])):
        d = tmp_path / "svc" / version
        d.mkdir(parents=True)
        model = {"shapes": {"Kind": {"enum": values, "type": "string"}, "Ref": {"shape": "Kind"}}}
        with gzip.open(d / "service-2.json.gz", "wt") as f:
            json.dump(model, f)
    monkeypatch.setattr(catalog, "_botocore_data_dir", lambda: tmp_path)
    catalog.service_enum.cache_clear()
    try:
        assert catalog.service_enum("svc", "Kind") == ("b", "a")
    finally:
        catalog.service_enum.cache_clear()


def test_negative_count():
    errs = errors_for(lambda d: d["hyperpod"]["instance_groups"][0].update(instance_count=-1))
    assert errs == [
        "hyperpod.instance_groups[0].instance_count: Input should be greater than or equal to 0 (given: -1)"
    ]


def test_threads_per_core():
    errs = errors_for(lambda d: d["hyperpod"]["instance_groups"][0].update(threads_per_core=3))
    assert errs == [
        "hyperpod.instance_groups[0].threads_per_core: 3 threads per core is not allowed; allowed: "
        "1 (multithreading off) or 2 (on)"
    ]


@pytest.mark.parametrize("gib", [0, 16385])
def test_ebs_range(gib):
    errs = errors_for(lambda d: d["hyperpod"]["instance_groups"][0].update(ebs_volume_gib=gib))
    assert errs == [
        f"hyperpod.instance_groups[0].ebs_volume_gib: {gib} GiB is outside the HyperPod EBS volume "
        "size range; allowed: 1-16384 GiB"
    ]


def test_fsx_capacity_steps():
    errs = errors_for(lambda d: d["fsx"].update(storage_capacity_gib=3600))
    assert errs == [
        "fsx.storage_capacity_gib: 3600 GiB is not a PERSISTENT_2 storage capacity; allowed: 1200, "
        "2400, then multiples of 2400 GiB"
    ]


@pytest.mark.parametrize("gib", [1200, 2400, 4800, 9600])
def test_fsx_capacity_allowed(gib):
    data = dev_data()
    data["fsx"]["storage_capacity_gib"] = gib
    assert parse_environment(data).fsx.storage_capacity_gib == gib


def test_fsx_throughput():
    errs = errors_for(lambda d: d["fsx"].update(throughput_mb_s_per_tib=200))
    assert errs == [
        "fsx.throughput_mb_s_per_tib: 200 MB/s/TiB is not a PERSISTENT_2 per-unit storage "
        "throughput; allowed: 125, 250, 500, 1000"
    ]


def test_bucket_name_length():
    errs = errors_for(lambda d: d.update(name_prefix="hpray-development-east"))
    assert errs == [
        "name_prefix: generated bucket name 'sagemaker-hpray-development-east-lifecycle-"
        "111111111111-us-east-1' is 65 characters; S3 allows at most 63 (shorten name_prefix)"
    ]


def test_duplicate_group_names():
    def mutate(d):
        g = d["hyperpod"]["instance_groups"][0]
        d["hyperpod"]["instance_groups"] = [g, dict(g)]

    assert errors_for(mutate) == [
        "hyperpod.instance_groups: instance group names must be unique; repeated: gpu-workers"
    ]


def test_production_requires_tags():
    def mutate(d):
        d["production"] = True
        d["observability"]["alarm_emails"] = ["oncall@example.com"]
        d["eks"]["extended_support_acknowledged"] = True
        del d["tags"]["Owner"], d["tags"]["CostCenter"]

    assert errors_for(mutate) == ["tags: production environments require Owner, CostCenter"]


def test_account_id():
    assert errors_for(lambda d: d.update(account="1234")) == [
        "account: '1234' is not an AWS account ID; expected 12 digits (quote it in YAML)"
    ]


def test_nat_default_follows_production():
    assert load_environment("dev").network.nat_gateway_count(production=False) == 1
    prod = load_environment("prod")
    assert prod.network.nat_gateway_count(production=prod.production) == len(prod.network.availability_zones)


def test_three_mistakes_are_reported_together():
    def mutate(d):
        d["network"]["vpc_cidr"] = "10.10.0.0/33"
        d["hyperpod"]["instance_groups"][0]["threads_per_core"] = 3
        d["fsx"]["throughput_mb_s_per_tib"] = 7

    errs = errors_for(mutate)
    assert len(errs) == 3
    assert [e.split(":")[0] for e in errs] == [
        "network.vpc_cidr",
        "hyperpod.instance_groups[0].threads_per_core",
        "fsx.throughput_mb_s_per_tib",
    ]


def test_cli_with_three_mistakes_prints_all_and_writes_no_template(tmp_path):
    """The real `cdk synth` path: exit non-zero, every error, no traceback, no templates."""
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    text = (ROOT / "config" / "dev.yaml").read_text()
    text = text.replace("vpc_cidr: 10.10.0.0/16", "vpc_cidr: 10.10.0.0/33")
    text = text.replace("storage_capacity_gib: 1200", "storage_capacity_gib: 1300")
    text = text.replace("aws_interface_endpoints: false", "aws_interface_endpoint: false")
    (config_dir / "broken.yaml").write_text(text)
    out = tmp_path / "cdk.out"
    env = {
        "CDK_OUTDIR": str(out),
        "CDK_CONTEXT_JSON": json.dumps({"env": "broken", "config_dir": str(config_dir)}),
        "PATH": os.environ["PATH"],
        # jsii's banners about the machine's Node.js version are silenced as the Makefile does.
        **{k: v for k, v in os.environ.items() if k.startswith("JSII_SILENCE_WARNING_")},
    }
    proc = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("- ")]
    assert len(lines) == 3, proc.stderr
    assert proc.stderr.startswith("broken.yaml: 3 configuration errors:")
    assert any("network.vpc_cidr" in line for line in lines)
    assert any("fsx.storage_capacity_gib" in line for line in lines)
    assert any("did you mean 'aws_interface_endpoints'" in line for line in lines)
    assert not out.exists() or not list(out.glob("*.template.json"))
