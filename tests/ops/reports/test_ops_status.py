"""status: pure summaries of realistic API objects, and the whole report gathered from moto plus a
fake Kubernetes API (the thin ops.clients.kube client is replaced at its boundary)."""

from __future__ import annotations

import io
import json
import re

import boto3
import pytest

from ops.errors import KubernetesError
from ops.reports import status
from tests.ops.fakes import (
    ACCOUNT,
    REGION,
    head_pod,
    hyperpod_node,
    operator_deployment,
    rayjob,
    rayservice,
    shared_aws,
    system_node,
)

I1, I2 = "i-0a1b2c3d4e5f60001", "i-0a1b2c3d4e5f60002"


def node_summary(instance_id, status="Running", group="gpu-workers"):
    # A ListClusterNodes summary as the SageMaker API returns it.
    return {
        "InstanceGroupName": group,
        "InstanceId": instance_id,
        "InstanceType": "ml.g5.12xlarge",
        "LaunchTime": "2026-12-01T08:01:55Z",
        "InstanceStatus": {"Status": status, "Message": ""},
    }


CLUSTER = {
    "ClusterName": "hpray-dev-hyperpod",
    "ClusterStatus": "InService",
    "InstanceGroups": [
        {
            "InstanceGroupName": "gpu-workers",
            "InstanceType": "ml.g5.12xlarge",
            "CurrentCount": 2,
            "TargetCount": 2,
            "Status": "InService",
        }
    ],
}


def test_node_with_unhealthy_label_is_reported_with_its_meaning():
    k8s = [
        hyperpod_node(I1),
        hyperpod_node(
            I2,
            health="UnschedulablePendingReplacement",
            deep="Failed",
            faults={"type": "GpuHealth", "reason": "XidError79"},
        ),
        system_node(),
    ]
    hp = status.summarize_hyperpod("hpray-dev-hyperpod", CLUSTER, [node_summary(I2), node_summary(I1)], k8s)
    rows = {n["instance_id"]: n for n in hp["nodes"]}
    assert [n["instance_id"] for n in hp["nodes"]] == [I1, I2]
    assert rows[I1]["healthy"] is True and rows[I1]["health"] == "Schedulable"
    bad = rows[I2]
    assert (bad["health"], bad["healthy"], bad["deep_health_check"], bad["kubernetes_node"]) == (
        "UnschedulablePendingReplacement",
        False,
        "Failed",
        f"hyperpod-{I2}",
    )
    assert (
        bad["detail"]
        == "failed health checks; HyperPod replaces it when node recovery is Automatic; reason=XidError79; type=GpuHealth"
    )
    assert hp["problems"] == [f"node {I2} (gpu-workers) is UnschedulablePendingReplacement: {bad['detail']}"]


def test_not_ready_node_and_missing_kubernetes_node():
    k8s = [hyperpod_node(I1, ready=False)]
    hp = status.summarize_hyperpod("c", CLUSTER, [node_summary(I1), node_summary(I2)], k8s)
    rows = {n["instance_id"]: n for n in hp["nodes"]}
    assert rows[I1]["detail"] == "passed health checks; NotReady (KubeletNotReady)"
    assert rows[I2]["health"] == "unknown" and rows[I2]["detail"] == "no Kubernetes node for this instance (yet)"
    assert len(hp["problems"]) == 2


def test_instance_not_running_and_group_short_of_target():
    cluster = {
        **CLUSTER,
        "ClusterStatus": "Updating",
        "InstanceGroups": [{**CLUSTER["InstanceGroups"][0], "CurrentCount": 1}],
    }
    hp = status.summarize_hyperpod(
        "c",
        cluster,
        [
            node_summary(I1),
            {
                **node_summary(I2, "Pending"),
                "InstanceStatus": {"Status": "Pending", "Message": "Replacing faulty node"},
            },
        ],
        [hyperpod_node(I1)],
    )
    assert hp["problems"] == [
        "HyperPod cluster c is Updating",
        "instance group gpu-workers has 1 of 2 instances",
        f"node {I2} (gpu-workers) is Pending: Replacing faulty node",
    ]


def test_kubernetes_unreachable_means_health_unknown_not_unhealthy():
    hp = status.summarize_hyperpod("c", CLUSTER, [node_summary(I1)], None)
    assert hp["nodes"][0]["health"] == "unknown" and hp["problems"] == []


@pytest.mark.parametrize(
    ("stage", "job", "deployment", "failed", "finished"),
    [
        ("new", "-", "New", 0, False),
        ("initializing", "-", "Initializing", 0, False),
        ("running", "RUNNING", "Running", 0, False),
        ("retrying", "FAILED", "Retrying", 1, False),
        ("running-again", "RUNNING", "Running", 1, False),
        ("complete", "SUCCEEDED", "Complete", 1, True),
        ("failed", "FAILED", "Failed", 3, True),
    ],
)
def test_rayjob_summary_through_its_status_transitions(stage, job, deployment, failed, finished):
    s = status.summarize_rayjob(rayjob(stage))
    assert (s["job_status"], s["deployment_status"], s["failed_attempts"], s["finished"]) == (
        job,
        deployment,
        failed,
        finished,
    )


def test_rayservice_and_operator_summaries():
    ready, starting = status.summarize_rayservice(rayservice(True)), status.summarize_rayservice(rayservice(False))
    assert (ready["ready"], ready["service_status"], ready["applications"], ready["serve_endpoints"]) == (
        True,
        "Running",
        {"llm": "RUNNING"},
        2,
    )
    assert (starting["ready"], starting["ready_reason"], starting["applications"]) == (
        False,
        "Initializing",
        {"llm": "DEPLOYING"},
    )
    assert status.summarize_operator([operator_deployment()])["ready"] is True
    down = status.summarize_operator([operator_deployment(ready=0)])
    assert down["problems"] == [
        "KubeRay operator kuberay-system/kuberay-operator not ready: 0/1 ready; Deployment does not have minimum availability."
    ]
    assert status.summarize_operator([])["problems"][0].startswith("KubeRay operator not installed")


class FakeKube:
    """Stands in for ops.clients.kube.Kube: the same methods, realistic objects."""

    def __init__(self, nodes, deployments, jobs, services, heads=()):
        self.nodes, self.deployments, self.jobs, self.services = nodes, deployments, jobs, services
        self.heads = list(heads)
        self.pod_lists = []

    def list_pods(self, namespace, label_selector):
        self.pod_lists.append((namespace, label_selector))
        return self.heads

    def list_nodes(self, label_selector=None):
        return self.nodes

    def list_operator_deployments(self):
        return self.deployments

    def list_ray(self, kind):
        return self.jobs if kind == "RayJob" else self.services


FS_ID = "fs-0a1b2c3d4e5f67890"


def stub_fsx(aws, lifecycle="AVAILABLE"):
    """moto 5.2.5's DescribeFileSystems leaves out ``Lifecycle`` (the one field status needs), so
    this call is stubbed at the client with the response FSx gives for our file system."""
    from botocore.stub import Stubber

    stubber = Stubber(aws.client("fsx"))
    fs = {
        "FileSystemId": FS_ID,
        "FileSystemType": "LUSTRE",
        "Lifecycle": lifecycle,
        "StorageCapacity": 1200,
        "StorageType": "SSD",
        "DNSName": f"{FS_ID}.fsx.us-east-1.amazonaws.com",
        "LustreConfiguration": {
            "DeploymentType": "PERSISTENT_2",
            "PerUnitStorageThroughput": 125,
            "MountName": "abcdefgh",
        },
    }
    if lifecycle == "FAILED":
        fs["FailureDetails"] = {"Message": "The file system could not be created: subnet has no free IP addresses"}
    stubber.add_response("describe_file_systems", {"FileSystems": [fs]}, {"FileSystemIds": [FS_ID]})
    stubber.activate()
    return stubber


def deploy_to_moto(config):
    """What `cdk deploy` would leave behind, created in moto: HyperPod cluster, EKS cluster,
    FSx file system and the storage stack output that names it."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.0.0/20", AvailabilityZone="us-east-1d")["Subnet"]["SubnetId"]
    role = f"arn:aws:iam::{ACCOUNT}:role/hpray-dev-hyperpod-execution"
    boto3.client("sagemaker", region_name=REGION).create_cluster(
        ClusterName=config.hyperpod_cluster_name,
        InstanceGroups=[
            {
                "InstanceGroupName": "gpu-workers",
                "InstanceType": "ml.g5.12xlarge",
                "InstanceCount": 2,
                "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hpray-dev-lifecycle/", "OnCreate": "on_create.sh"},
                "ExecutionRole": role,
                "ThreadsPerCore": 1,
            }
        ],
        VpcConfig={"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": [subnet]},
    )
    boto3.client("eks", region_name=REGION).create_cluster(
        name=config.eks_cluster_name,
        version="1.33",
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks",
        resourcesVpcConfig={"subnetIds": [subnet]},
    )
    fs = FS_ID
    template = {
        "Resources": {
            "Marker": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Type": "String", "Name": "/hpray-dev/fsx-id", "Value": fs},
            }
        },
        "Outputs": {"FileSystemId": {"Value": fs}},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="HprayDevStorage", TemplateBody=json.dumps(template)
    )
    return fs


@pytest.fixture(scope="module")
def deployed(shared_moto):
    """The dev environment as `cdk deploy` leaves it, once for the module."""
    from config import parse_environment
    from tests.ops.fakes import healthy_data

    deploy_to_moto(parse_environment(healthy_data()))


def test_status_report_from_moto_and_kubernetes(deployed, healthy_config):
    fs = FS_ID
    # moto names HyperPod instances "<group>-<n>"; HyperPod names the Kubernetes node "hyperpod-<instance id>".
    kube = FakeKube(
        [
            hyperpod_node("gpu-workers-0"),
            hyperpod_node("gpu-workers-1", health="UnschedulablePendingReboot", deep="Failed"),
        ],
        [operator_deployment()],
        [rayjob("running")],
        [rayservice(True)],
    )
    aws = shared_aws()
    stub_fsx(aws)
    report = status.gather(healthy_config, aws, lambda: kube)
    assert report["hyperpod"]["status"] == "InService"
    assert [(n["instance_id"], n["status"], n["health"]) for n in report["hyperpod"]["nodes"]] == [
        ("gpu-workers-0", "Running", "Schedulable"),
        ("gpu-workers-1", "Running", "UnschedulablePendingReboot"),
    ]
    assert report["eks"]["status"] == "ACTIVE" and report["eks"]["version"] == "1.33"
    assert report["fsx"]["file_system_id"] == fs and report["fsx"]["lifecycle"] == "AVAILABLE"
    assert report["kuberay_operator"]["ready"] is True
    assert report["rayjobs"][0]["job_status"] == "RUNNING"
    assert report["problems"] == [
        "node gpu-workers-1 (gpu-workers) is UnschedulablePendingReboot: failed health checks; HyperPod reboots it when node recovery is Automatic"
    ]

    text = status.render(report)
    assert "gpu-workers-1  gpu-workers  ml.g5.12xlarge  Running  UnschedulablePendingReboot" in text
    assert "ray-workloads/hpray-dev-train  RUNNING     Running" in text
    assert text.endswith("1 problem(s):\n  - " + report["problems"][0])


def test_status_when_nothing_is_deployed(deployed):
    from config import parse_environment
    from tests.ops.fakes import healthy_data

    def no_kube():
        raise AssertionError("Kubernetes must not be contacted when EKS does not exist")

    # Same account, an environment that was never deployed.
    config = parse_environment({**healthy_data(), "name_prefix": "hpray-qa"})
    report = status.gather(config, shared_aws(), no_kube)
    assert report["problems"] == [
        "HyperPod cluster hpray-qa-hyperpod does not exist",
        "EKS cluster hpray-qa-eks does not exist",
        "FSx for Lustre file system (storage stack not deployed) not found",
        "Kubernetes: EKS cluster hpray-qa-eks is not ACTIVE; Kubernetes checks skipped",
    ]


def test_status_when_kubernetes_is_unreachable(deployed, healthy_config):
    def unreachable():
        raise KubernetesError("cannot reach the Kubernetes API for list nodes: timed out")

    aws = shared_aws()
    stub_fsx(aws, "FAILED")
    report = status.gather(healthy_config, aws, unreachable)
    assert report["problems"] == [
        f"FSx {FS_ID} is FAILED: The file system could not be created: subnet has no free IP addresses",
        "Kubernetes: cannot reach the Kubernetes API for list nodes: timed out",
    ]
    text = status.render(report)
    assert re.search(r"^KubeRay operator +- +unknown +Kubernetes API not reachable$", text, re.M)
    assert "RayJobs" not in text  # not shown as "(none)" when they could not be listed


def test_status_fails_while_the_base_image_is_unpinned(deployed, healthy_config, pinned_dockerfile, tmp_path):
    def unreachable():
        raise KubernetesError("cannot reach the Kubernetes API for list nodes: timed out")

    unpinned = tmp_path / "Dockerfile"
    text = pinned_dockerfile.read_text()
    unpinned.write_text(re.sub(r'^ARG RAY_BASE_DIGEST=".*"$', 'ARG RAY_BASE_DIGEST=""', text, flags=re.M))
    aws = shared_aws()
    stub_fsx(aws)
    report = status.gather(healthy_config, aws, unreachable, dockerfile=unpinned)
    base = re.search(r"^ARG RAY_BASE=(\S+)$", text, re.M).group(1)
    assert report["problems"] == [
        "Kubernetes: cannot reach the Kubernetes API for list nodes: timed out",
        f"base image digest: the workloads image is built from {base} by tag alone: RAY_BASE_DIGEST in "
        "workloads/Dockerfile is empty; fix: hpray images pin-base (on a machine that reaches Docker Hub), "
        "then commit workloads/Dockerfile and deploy",
    ]
    aws = shared_aws()
    stub_fsx(aws)
    pinned = status.gather(healthy_config, aws, unreachable, dockerfile=pinned_dockerfile)
    assert pinned["problems"] == report["problems"][:1]
    assert pinned["images"][0]["status"] == "PASS"


def test_cli_status_json_and_exit_code(deployed, healthy_config):
    from ops.cli import main

    kube = FakeKube(
        [hyperpod_node("gpu-workers-0"), hyperpod_node("gpu-workers-1")],
        [operator_deployment()],
        [rayjob("complete")],
        [],
    )
    out = io.StringIO()

    def aws_with_fsx_stub(config, profile):
        aws = shared_aws(config.region)
        stub_fsx(aws)
        return aws

    code = main(
        ["status", "--env", "dev", "--json"],
        load_config=lambda name: healthy_config,
        aws_factory=aws_with_fsx_stub,
        kube_factory=lambda aws, cfg, args: kube,
        out=out,
    )
    report = json.loads(out.getvalue())
    assert code == 0 and report["problems"] == []
    assert report["rayjobs"][0]["deployment_status"] == "Complete"


def test_status_without_the_kuberay_crds(deployed, healthy_config):
    from ops.errors import NotFoundError

    aws = shared_aws()
    stub_fsx(aws)

    class NoCrds(FakeKube):
        def list_ray(self, kind):
            raise NotFoundError("list rayjobs: not found")

    report = status.gather(healthy_config, aws, lambda: NoCrds([hyperpod_node("gpu-workers-0")], [], [], []))
    assert report["kubernetes_error"] == "list rayjobs: not found (are the KubeRay CRDs installed?)"


def test_node_is_matched_by_provider_id_too():
    node = hyperpod_node(I1)
    node["metadata"]["name"] = "ip-10-11-3-17.ec2.internal"
    assert status.kubernetes_node_for(I1, [system_node(), node]) is node
    assert status.kubernetes_node_for("i-0000000000000000f", [system_node(), node]) is None


def test_render_of_an_environment_that_is_not_deployed():
    report = {
        "environment": "qa",
        "account": "111111111111",
        "region": "us-east-1",
        "kubernetes_error": "EKS cluster qa-eks is not ACTIVE",
        "kuberay_operator": None,
        "hyperpod": status.summarize_hyperpod("qa-hyperpod", None, [], None),
        "eks": status.summarize_eks("qa-eks", None),
        "fsx": status.summarize_fsx(None, None),
    }
    text = status.render(report)
    assert re.search(r"^HyperPod cluster +qa-hyperpod +NotFound +-$", text, re.M)
    assert text.endswith("  - Kubernetes: EKS cluster qa-eks is not ACTIVE")


# ---------------------------------------------------------------------------------------------
# The day-one check of security groups for pods (docs/security.md)
# ---------------------------------------------------------------------------------------------


def with_pod_eni(node, count):
    node["status"].setdefault("allocatable", {})["vpc.amazonaws.com/pod-eni"] = str(count)
    return node


def head_with_branch(cluster, eni=True):
    pod = head_pod(cluster)
    if eni:
        pod["metadata"]["annotations"] = {
            "vpc.amazonaws.com/pod-eni": '[{"eniId":"eni-0b1","ifAddress":"02:9a:3b:4c:5d:6e","privateIp":"10.10.130.40",'
            '"vlanId":1,"subnetCidr":"10.10.128.0/19"}]'
        }
    return pod


def test_pod_eni_passes_when_system_nodes_trunk_hyperpod_does_not_and_every_head_has_its_interface():
    from ops.reports.pod_eni import evaluate_pod_eni

    nodes = [with_pod_eni(system_node(), 38), hyperpod_node("i-0aaa")]
    check = evaluate_pod_eni(nodes, [head_with_branch("serve-raycluster-abcde")])
    assert (check.status, check.detail) == (
        "PASS",
        "1 system node(s) with branch interfaces, 1 HyperPod node(s) without; every running Ray head (1) has its "
        "branch interface",
    )


def test_pod_eni_warns_for_each_case_the_docs_name():
    from ops.reports.pod_eni import evaluate_pod_eni

    nodes = [system_node(), with_pod_eni(hyperpod_node("i-0aaa"), 9)]
    check = evaluate_pod_eni(nodes, [head_with_branch("serve-raycluster-abcde", eni=False)])
    assert check.status == "WARN"
    assert check.detail == (
        "system node(s) without vpc.amazonaws.com/pod-eni allocatable (no trunk interface: head pods there get no "
        "branch interface): ip-10-10-130-21.ec2.internal; "
        "HyperPod node(s) with vpc.amazonaws.com/pod-eni allocatable (the controller attached a trunk there after "
        "all: harmless): hyperpod-i-0aaa; "
        "Ray head(s) without the vpc.amazonaws.com/pod-eni annotation (no branch interface, not in the heads' "
        "security group, so the GCS store does not admit them): serve-raycluster-abcde-head-8xk2q"
    )
    assert "docs/security.md" in check.fix


def test_status_reports_the_pod_eni_check_without_counting_a_warn_as_a_problem(deployed, healthy_config):
    kube = FakeKube(
        [system_node(), hyperpod_node("gpu-workers-0"), hyperpod_node("gpu-workers-1")],
        [operator_deployment()],
        [],
        [rayservice(True)],
        heads=[head_with_branch("hpray-dev-serve-raycluster-abcde", eni=False)],
    )
    aws = shared_aws()
    stub_fsx(aws)
    report = status.gather(healthy_config, aws, lambda: kube)
    assert kube.pod_lists == [("ray-workloads", "ray.io/node-type=head")]
    assert report["pod_eni"]["status"] == "WARN"
    assert report["problems"] == []
    text = status.render(report)
    assert "Security groups for pods: WARN: system node(s) without vpc.amazonaws.com/pod-eni allocatable" in text
    assert "\n  fix: see docs/security.md" in text
    assert text.endswith("healthy")
