"""``teardown``: the Ray workloads of the workloads' and teams' namespaces deleted, then a wait until
no branch interface of the Ray heads' security group is left, before ``cdk destroy``.

EC2's DescribeSecurityGroups/DescribeNetworkInterfaces are botocore Stubbers on the CLI's own
client (moto ignores InterfaceType=branch and its interface-type filter); Kubernetes is a fake of
ops.clients.kube.Kube's Ray calls whose deleted objects go after a few lists, as a foreground
deletion does."""

from __future__ import annotations

import io

import pytest
from botocore.stub import Stubber

from config import parse_environment
from config.facts import permissions
from config.facts.names import RAY_HEADS_SECURITY_GROUP_DESCRIPTION
from ops.cli import main
from tests.ops.fakes import ACCOUNT, env_data, rayjob, rayservice, shared_aws

TEAMS = [{"name": "vision", "principal_arns": [f"arn:aws:iam::{ACCOUNT}:role/VisionTeam"]}]
HEADS_SG = "sg-0a1b2c3d4e5f60718"


@pytest.fixture
def config():
    data = env_data("dev")
    data["teams"] = TEAMS
    return parse_environment(data, source="test")


def raycluster(name, namespace, *, owner=None):
    meta = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "ray.io/v1", "kind": owner[0], "name": owner[1], "uid": "u1", "controller": True}
        ]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": {}}


class FakeKube:
    """list_ray/delete_ray as ops.clients.kube.Kube has them; a deleted object (and what it owns)
    stays ``linger`` more lists (its pods terminating) before it is gone."""

    def __init__(self, objects, linger=1):
        self.objects = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.deleting: dict[tuple, int] = {}
        self.linger = linger
        self.calls: list[tuple[str, str, str]] = []

    def list_ray(self, kind, namespace=None):
        self.calls.append(("ray.io", f"{kind.lower()}s", "list"))
        for key in [k for k, n in self.deleting.items() if n <= 0]:
            self.objects.pop(key, None)
            del self.deleting[key]
        items = [o for (k, ns, _), o in sorted(self.objects.items()) if k == kind and ns == namespace]
        for key in self.deleting:
            if key[0] == kind and key[1] == namespace:
                self.deleting[key] -= 1
        return items

    def delete_ray(self, kind, namespace, name):
        self.calls.append(("ray.io", f"{kind.lower()}s", "delete"))
        assert (kind, namespace, name) in self.objects
        self.deleting[(kind, namespace, name)] = self.linger
        # The garbage collector deletes what the object owns (a RayService's RayCluster).
        for key, obj in self.objects.items():
            owners = obj["metadata"].get("ownerReferences") or []
            if key[1] == namespace and any((o["kind"], o["name"]) == (kind, name) for o in owners):
                self.deleting[key] = self.linger


def branch_eni(eni_id, ip, *, status="in-use"):
    """A branch interface as the VPC resource controller leaves it (DescribeNetworkInterfaces)."""
    return {
        "NetworkInterfaceId": eni_id,
        "InterfaceType": "branch",
        "Description": "aws-k8s-branch-eni",
        "Status": status,
        "PrivateIpAddress": ip,
        "SubnetId": "subnet-0123456789abcdef0",
        "VpcId": "vpc-0123456789abcdef0",
        "Groups": [{"GroupId": HEADS_SG, "GroupName": "HprayDevCluster-RayHeadsSecurityGroup"}],
        "TagSet": [
            {"Key": "vpcresources.k8s.aws/trunk-eni-id", "Value": "eni-0trunk000000000001"},
            {"Key": "eks:eni:owner", "Value": "eks-vpc-resource-controller"},
        ],
    }


ENI_FILTERS = [
    {"Name": "interface-type", "Values": ["branch"]},
    {"Name": "group-id", "Values": [HEADS_SG]},
]


def stub_ec2(aws, interface_lists, *, group=HEADS_SG):
    """DescribeSecurityGroups (the heads' group of the cluster stack), then one
    DescribeNetworkInterfaces answer per list of ``interface_lists``."""
    stubber = Stubber(aws.client("ec2"))
    stubber.add_response(
        "describe_security_groups",
        {
            "SecurityGroups": [
                {
                    "GroupId": group,
                    "GroupName": "HprayDevCluster-RayHeadsSecurityGroup",
                    "Description": RAY_HEADS_SECURITY_GROUP_DESCRIPTION,
                    "VpcId": "vpc-0123456789abcdef0",
                    "OwnerId": ACCOUNT,
                }
            ]
            if group
            else []
        },
        {
            "Filters": [
                {"Name": "tag:aws:cloudformation:stack-name", "Values": ["HprayDevCluster"]},
                {"Name": "description", "Values": [RAY_HEADS_SECURITY_GROUP_DESCRIPTION]},
            ]
        },
    )
    for interfaces in interface_lists:
        stubber.add_response("describe_network_interfaces", {"NetworkInterfaces": interfaces}, {"Filters": ENI_FILTERS})
    stubber.activate()
    return stubber


def workloads():
    return [
        rayjob("running", name="train-a"),
        rayservice(True, name="serve"),
        raycluster("serve-raycluster-abcde", "ray-workloads", owner=("RayService", "serve")),
        raycluster("scratch", "ray-workloads"),
        rayjob("running", name="vision-train", namespace="team-vision"),
    ]


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def run_cli(config, aws, kube, *argv, clock=None):
    clock = clock or Clock()
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["teardown", "--env", "dev", *argv],
        load_config=lambda n: config,
        aws_factory=lambda c, p: aws,
        kube_factory=lambda a, c, args: kube,
        out=out,
        err=err,
        sleep=clock.sleep,
        clock=clock,
    )
    return code, out.getvalue(), err.getvalue()


def test_without_yes_it_lists_what_it_would_delete_and_deletes_nothing(config):
    aws = shared_aws()
    stubber = stub_ec2(aws, [[branch_eni("eni-0b1", "10.10.130.40"), branch_eni("eni-0b2", "10.10.131.7")]])
    kube = FakeKube(workloads())
    code, out, _ = run_cli(config, aws, kube)
    stubber.assert_no_pending_responses()
    assert code == 0
    assert not any(verb == "delete" for _, _, verb in kube.calls)
    assert out.splitlines() == [
        "4 Ray workload(s) in ray-workloads, team-vision: teardown would delete",
        "  RayJob ray-workloads/train-a",
        "  RayService ray-workloads/serve",
        "  RayCluster ray-workloads/scratch",
        "  RayJob team-vision/vision-train",
        f"2 branch interface(s) in the Ray heads' group {HEADS_SG}",
        "  eni-0b1 in-use trunk eni-0trunk000000000001 10.10.130.40",
        "  eni-0b2 in-use trunk eni-0trunk000000000001 10.10.131.7",
        "dry run: nothing deleted. To act: python -m ops teardown --env dev --yes (deletes the workloads above and "
        "waits until no branch interface is left), then npx cdk destroy --all -c env=dev",
    ]


def test_yes_deletes_the_workloads_and_waits_until_no_branch_interface_is_left(config):
    aws = shared_aws()
    two = [branch_eni("eni-0b1", "10.10.130.40"), branch_eni("eni-0b2", "10.10.131.7")]
    stubber = stub_ec2(aws, [two, two, [two[1]], []])
    kube = FakeKube(workloads())
    clock = Clock()
    code, out, err = run_cli(config, aws, kube, "--yes", "--poll-seconds", "10", clock=clock)
    assert code == 0, err
    stubber.assert_no_pending_responses()
    # Every workload of its own deleted, the owned RayCluster left to its RayService.
    deleted = [c for c in kube.calls if c[2] == "delete"]
    assert deleted == [
        ("ray.io", "rayjobs", "delete"),
        ("ray.io", "rayservices", "delete"),
        ("ray.io", "rayclusters", "delete"),
        ("ray.io", "rayjobs", "delete"),
    ]
    assert kube.objects == {}
    lines = out.splitlines()
    assert lines[0] == "4 Ray workload(s) in ray-workloads, team-vision: teardown deletes"
    assert "waiting (0 s of 1200 s): 4 Ray workload(s), 2 branch interface(s) left" in lines
    assert "waiting (10 s of 1200 s): 0 Ray workload(s), 1 branch interface(s) left" in lines
    assert lines[-1] == "no Ray workload and no branch interface left after 20 s: run npx cdk destroy --all -c env=dev"
    assert clock.sleeps == [10.0, 10.0]


def test_interfaces_still_there_at_the_timeout_fail_naming_them_with_the_fix(config):
    aws = shared_aws()
    left = branch_eni("eni-0b9", "10.10.130.99", status="available")
    stub_ec2(aws, [[left]] * 6)
    kube = FakeKube([rayjob("running", name="train-a")])
    code, out, err = run_cli(config, aws, kube, "--yes", "--timeout-minutes", "1", "--poll-seconds", "30")
    assert code == 1
    assert (
        "error: after 60 s 0 Ray workload(s) and 1 branch interface(s) of the heads' group "
        f"{HEADS_SG} are still there: eni-0b9 available trunk eni-0trunk000000000001 10.10.130.99"
    ) in err
    assert "aws ec2 delete-network-interface --network-interface-id ID" in err
    assert "npx cdk destroy" not in out


def test_without_the_cluster_stack_there_is_nothing_to_wait_for(config):
    aws = shared_aws()
    stub_ec2(aws, [], group=None)
    code, out, _ = run_cli(config, aws, FakeKube([]), "--yes")
    assert code == 0
    assert "no Ray heads' security group of stack HprayDevCluster: no branch interfaces to wait for" in out
    assert (
        out.splitlines()[-1]
        == "no Ray workload and no branch interface left after 0 s: run npx cdk destroy --all -c env=dev"
    )


def test_bad_timeout_is_one_usage_error(config):
    code, _, err = run_cli(config, None, None, "--timeout-minutes", "0")
    assert code == 2
    assert "argument --timeout-minutes: '0' must be at least 1" in err


def test_teardown_calls_exactly_the_documented_actions(config):
    from tests.ops.test_ops_permissions import recording_aws

    aws, calls = recording_aws()
    stub_ec2(aws, [[branch_eni("eni-0b1", "10.10.130.40")], []])
    kube = FakeKube(workloads(), linger=0)
    code, _, err = run_cli(config, aws, kube, "--yes")
    assert code == 0, err
    assert tuple(calls) == permissions.TEARDOWN
    assert set(kube.calls) == set(permissions.K8S_TEARDOWN)
