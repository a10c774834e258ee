"""Every flow of the flow table (constructs/flow_table.py), proven against each environment's synthesized assembly, and
the faults of issue 18 that the flows found (each test fails on the code before its fix)."""

from __future__ import annotations

import json
import shutil

import pytest
from constructs import flows as F

from config.facts.jobs import JOBS_PREFIX
from constructs.access_flows import ENI_ACTIONS, asset_pull_flows
from constructs.network_flows import network_flows
from manifests.network_policy import POD_FLOWS
from review.__main__ import main as review_main
from review.assembly import load_assembly
from review.flows import check_flows
from review.policy import resource_types

ENVIRONMENTS = ("dev", "staging", "prod")


@pytest.fixture(scope="module")
def results(synthesized):
    cache: dict[str, dict] = {}

    def get(env: str):
        if env not in cache:
            assembly, config, _ = synthesized(env)
            stacks = load_assembly(assembly.directory).stacks
            cache[env] = {r.name: r for r in check_flows(stacks, config)}
        return cache[env]

    return get


def _assert_ok(results: dict, names) -> None:
    bad = [f"{n}: {results[n].detail}" for n in names if not results[n].ok]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_flow_is_allowed(results, env):
    r = results(env)
    _assert_ok(r, sorted(r))


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_flow_table_is_complete(synthesized, results, env):
    _, config, _ = synthesized(env)
    names = set(results(env))
    # The list: DNS, Ray both ways, operator to heads, kubelet, FSx from both pools and the
    # heads, the EKS API from nodes and the kubectl handler, EFA, Serve.
    assert {
        "hyperpod-dns-udp",
        "worker->head:6379",
        "head->worker:ray",
        "operator->head:dashboard",
        "control-plane->system:kubelet",
        "control-plane->hyperpod:kubelet",
        "ray-workers->fsx:988-988",
        "ray-head->fsx:1018-1023",
        "hyperpod->eks-api",
        "system->eks-api",
        "kubectl->eks-api",
        "hyperpod-efa",
        "system->serve",
        "fsx-slr-platform-key",
        "execution-role-ebs-grant",
        "csi-describe-fsx",
        "flow-logs-write",
        "logs-flow-log-key",
        "workloads-ray-auth-secret",
        "workloads-ray-auth-key",
    } <= names
    assert {f"cni-{a.split(':')[1]}" for a in ENI_ACTIONS} <= names
    for loc in F.s3_locations(config):
        assert f"workloads-s3:{loc.bucket}/{loc.prefix}" in names


# --- fault 1: the two node pools ------------------------------------------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_node_pools_are_joined(results, env):
    _assert_ok(
        results(env),
        [
            "hyperpod-dns-udp",
            "hyperpod-dns-tcp",
            "worker->head:6379",
            "worker->head:ray",
            "head->worker:ray",
            "ray-head->fsx:988-988",
            "ray-head->fsx:1018-1023",
            "system->serve",
        ],
    )


def test_system_nodes_are_found_by_the_eks_created_group(results):
    # The operator runs on the system nodes with their group; the heads have their own.
    detail = results("dev")["operator->head:dashboard"].detail
    assert "EKS default rule of the cluster security group" in detail
    assert "RayHeadsHeadsFromOperator" in detail


# --- EFA (found by the flows, beyond the list) -----------------------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_efa_has_group_rules_both_ways(results, env):
    r = results(env)["hyperpod-efa"]
    assert r.ok and "EFA" in r.detail, r.detail


# --- fault 5: FSx's service-linked role and the platform key -----------------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_fsx_service_linked_role_may_use_the_platform_key(results, env):
    r = results(env)["fsx-slr-platform-key"]
    assert r.ok and "key policy [AllowFsxDataRepositoryAccess]" in r.detail, r.detail


# --- fault 6 (first half): EBS grants ----------------------------------------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_execution_role_creates_grants_for_ebs(results, env):
    r = results(env)["execution-role-ebs-grant"]
    assert r.ok and "EbsVolumeKeyGrants" in r.detail, r.detail


# --- fault 7: every S3 prefix a workload reads ------------------------------------------------


def test_prod_llm_weights_are_readable(synthesized, results):
    _, config, _ = synthesized("prod")
    source = config.inference.llm.model_source
    assert source.startswith("s3://") and "/models/" in source
    loc = next(x for x in F.s3_locations(config) if x.source == "inference.llm.model_source")
    r = results("prod")
    _assert_ok(
        r,
        [
            f"workloads-s3:{loc.bucket}/{loc.prefix}",
            f"workloads-list:{loc.bucket}/{loc.prefix}",
            f"workloads-key:{loc.bucket}/{loc.prefix}",
        ],
    )


def test_s3_locations_come_from_config(synthesized):
    # prod: the LLM RayService is on there (dev's system pool has no room for its head).
    _, config, _ = synthesized("prod")
    data = config.model_dump()
    # The raw-text path (prod trains on its pretokenized dataset: the byte path's fields instead).
    data["training"].update(data_path="s3://other-bucket/corpus/text", dataset_path=None, tokenizer="bytes")
    data["pretokenize"]["tokenizer"] = "s3://tok-bucket/llama-3/tokenizer.json"
    # training.storage_path is a shared POSIX path (config/training.py refuses s3://): no S3 location.
    data["training"]["storage_path"] = "/fsx/runs"
    data["inference"]["storage_path"] = "s3://runs-bucket/runs"
    data["inference"]["llm"] = {
        **data["inference"]["llm"],
        "model_source": "s3://weights-bucket/models/llm",
        "external_model": True,
    }
    changed = type(config).model_validate(data)
    locs = {(x.bucket, x.prefix, x.write, x.source) for x in F.s3_locations(changed)}
    assert locs == {
        (config.bucket_names()["checkpoints"], config.fsx.import_export_prefix, True, "fsx.import_export_prefix"),
        ("other-bucket", "corpus/text/", False, "training.data_path"),
        ("runs-bucket", "runs/", False, "inference.storage_path"),
        ("weights-bucket", "models/llm/", False, "inference.llm.model_source"),
        ("hpray-prod-corpus", "fineweb-edu/", False, "pretokenize.input"),
        ("tok-bucket", "llama-3/", False, "pretokenize.tokenizer"),
        (config.bucket_names()["checkpoints"], JOBS_PREFIX, False, "jobs.prefix"),
    }


# --- fault 9: ENI actions and the resource types they authorize ----------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cni_actions_cover_every_resource_type(results, env):
    r = results(env)
    _assert_ok(r, [f"cni-{a.split(':')[1]}" for a in ENI_ACTIONS])
    # The check asks for every type IAM's table lists: detaching authorizes the instance too.
    assert "instance" in resource_types("ec2:DetachNetworkInterface")


# --- a flow nothing allows fails the review (and so `make synth`) -------------------------------


def test_review_exits_non_zero_naming_each_broken_flow(synthesized, tmp_path, capsys):
    assembly, _, _ = synthesized("dev")
    copy = tmp_path / "cdk.out"
    shutil.copytree(assembly.directory, copy)
    template = next(copy.glob("*Cluster.template.json"))
    data = json.loads(template.read_text())
    dropped = [
        lid
        for lid, r in data["Resources"].items()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
        and "DNS from HyperPod" in r["Properties"].get("Description", "")
    ]
    assert dropped
    for lid in dropped:
        del data["Resources"][lid]
    template.write_text(json.dumps(data))
    rc = review_main([str(copy), "--no-diagram"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 4
    assert [line for line in err if line.startswith("flows:")] == [
        line for line in err if line.startswith("flows: dev: hyperpod-dns-udp ")
    ] and len([line for line in err if line.startswith("flows:")]) == 1
    report = (copy / "review" / "dev.md").read_text()
    assert "## Flows" in report and "not allowed" in report


def test_review_report_lists_each_flow_with_what_allows_it(synthesized, tmp_path):
    assembly, _, _ = synthesized("dev")
    out = tmp_path / "review"
    assert review_main([str(assembly.directory), "--no-diagram", "--out", str(out)]) == 0
    report = (out / "dev.md").read_text()
    assert "## Flows" in report
    assert "worker->head:6379" in report and "EksSystemFromHyperPodTcp" in report


def test_flow_parts_are_declared():
    for flow in network_flows():
        assert flow.source in F.PARTS and flow.destination in F.PARTS, flow.name
    assert F.ray_head_ports()[:3] == (6379, 8265, 10001)


# --- Ray token authentication and the workloads' NetworkPolicies ---------------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_ray_pods_read_and_decrypt_the_auth_token(results, env):
    r = results(env)
    _assert_ok(r, ["workloads-ray-auth-secret", "workloads-ray-auth-key"])


def test_a_reader_without_the_key_cannot_read_the_token(synthesized):
    assembly, config, _ = synthesized("dev")
    stacks = load_assembly(assembly.directory).stacks
    for stack in stacks:
        for r in (stack.template.get("Resources") or {}).values():
            if r["Type"] == "AWS::IAM::Policy":
                doc = r["Properties"]["PolicyDocument"]
                doc["Statement"] = [
                    s for s in doc["Statement"] if "secretsmanager" not in json.dumps(s.get("Condition", {}))
                ]
    r = {x.name: x for x in check_flows(stacks, config)}
    assert r["workloads-ray-auth-secret"].ok
    assert not r["workloads-ray-auth-key"].ok
    assert "kms:Decrypt" in r["workloads-ray-auth-key"].detail


def test_pod_flows_of_the_network_policies_are_in_the_table():
    """What the NetworkPolicies allow between parts must pass the security groups too; a row
    from namespaces picked by label (any pool) has no part to prove."""
    names = {f.name for f in network_flows()}
    fitting = [row for row in POD_FLOWS if row[1] in F.PARTS and row[2] in F.PARTS]
    assert {row[0] for row in fitting} <= names
    assert len(fitting) == 6
    assert {row[1] for row in POD_FLOWS if row not in fitting} == {"serve-clients"}


# --- images through ECR's pull-through cache (network.images_from_ecr) -------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_node_roles_may_import_what_they_pull_through_the_cache(synthesized, results, env):
    _, config, _ = synthesized(env)
    pulls = sorted(n for n in results(env) if n.startswith("pull-through:"))
    if not config.network.images_from_ecr:
        assert pulls == []
        return
    expected = ["pull-through:system-node-role:quay/kuberay/operator"]
    if config.inference.llm.enabled:
        expected += [
            "pull-through:hyperpod-execution-role:docker-hub/rayproject/ray-llm",
            "pull-through:system-node-role:docker-hub/rayproject/ray-llm",
        ]
    assert pulls == sorted(expected)
    _assert_ok(results(env), pulls)


def test_a_node_role_without_the_import_statement_cannot_pull_through(synthesized):
    assembly, config, _ = synthesized("prod")
    stacks = load_assembly(assembly.directory).stacks
    for stack in stacks:
        for r in (stack.template.get("Resources") or {}).values():
            docs = [r["Properties"]["PolicyDocument"]] if r["Type"] == "AWS::IAM::Policy" else []
            docs += (
                [p["PolicyDocument"] for p in r["Properties"].get("Policies") or []]
                if r["Type"] == "AWS::IAM::Role"
                else []
            )
            for doc in docs:
                doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != "PullThroughCacheImport"]
    r = {x.name: x for x in check_flows(stacks, config)}
    for name in (
        "pull-through:system-node-role:quay/kuberay/operator",
        "pull-through:hyperpod-execution-role:docker-hub/rayproject/ray-llm",
    ):
        assert not r[name].ok
        assert "ecr:BatchImportUpstreamImage" in r[name].detail


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_hyperpod_nodes_may_pull_the_cdk_image_assets(synthesized, results, env):
    """The workloads image, and in closed networks the NVIDIA device plugin, are CDK assets in the
    CDK assets repository (review/images.py): the HyperPod execution role may pull from it."""
    _, config, _ = synthesized(env)
    flow = results(env)["asset-pull:hyperpod-execution-role"]
    assert flow.ok, flow.detail
    assert "EcrPullInRegion" in flow.detail

    (declared,) = asset_pull_flows(config)
    assert ("NVIDIA device plugin" in declared.what) == config.network.images_from_ecr


def test_a_hyperpod_role_without_ecr_read_cannot_pull_the_assets(synthesized):
    assembly, config, _ = synthesized("prod")
    stacks = load_assembly(assembly.directory).stacks
    for stack in stacks:
        for r in (stack.template.get("Resources") or {}).values():
            if r["Type"] == "AWS::IAM::Policy":
                doc = r["Properties"]["PolicyDocument"]
                doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != "EcrPullInRegion"]
    flow = {x.name: x for x in check_flows(stacks, config)}["asset-pull:hyperpod-execution-role"]
    assert not flow.ok
    assert "ecr:BatchCheckLayerAvailability" in flow.detail


def test_jobs_read_locations_reach_the_workloads_role_and_the_flows_prove_it(tmp_path):
    """jobs.read_locations (issue 37): the users' own buckets/prefixes, read only, in the workloads
    role's policy; the flow checks prove list/get on each against the synthesized templates."""
    from app import build_app
    from manifests.check import load_checked
    from tests.conftest import new_app

    config = load_checked("dev")
    data = config.model_dump()
    data["jobs"] = {"read_locations": ["s3://my-team-datasets/corpus/", "s3://my-other-bucket/"]}
    changed = type(config).model_validate(data)
    mine = [x for x in F.s3_locations(changed) if x.source.startswith("jobs.read_locations")]
    assert [(x.bucket, x.prefix, x.write) for x in mine] == [
        ("my-team-datasets", "corpus/", False),
        ("my-other-bucket", "", False),
    ]
    app = new_app(tmp_path, env="dev")
    build_app(app, changed)
    stacks = load_assembly(app.synth().directory).stacks
    results = {r.name: r for r in check_flows(stacks, changed)}
    names = [f"workloads-{what}:{x.bucket}/{x.prefix}" for x in mine for what in ("s3", "list")]
    _assert_ok(results, names)
    # Reading is all: no write to the user's bucket.
    policies = json.dumps(
        [r for s in stacks for r in s.template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
    )
    assert "arn:aws:s3:::my-team-datasets/corpus/*" in policies
