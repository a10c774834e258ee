"""The `eks:` section and config/versions.py: every rule with its exact message."""

from __future__ import annotations

from pathlib import Path

from config import catalog, parse_environment, versions
from tests.config.config_data import config_errors, env_data

ROOT = Path(__file__).resolve().parents[2]


def errors_for(mutate, env: str = "dev") -> list[str]:
    return config_errors(env, mutate)


def valid(mutate, env: str = "dev"):
    data = env_data(env)
    mutate(data)
    return parse_environment(data, source="test.yaml")


def test_unsupported_kubernetes_version():
    errors = errors_for(lambda d: d["eks"].update(kubernetes_version="1.27"))
    assert errors == [
        "eks.kubernetes_version: Kubernetes '1.27' is not supported; allowed: 1.33, 1.34 (HyperPod supports "
        "1.28, 1.29, 1.30, 1.31, 1.32, 1.33, 1.34; add-ons and kubectl are pinned in "
        "config/versions.py only for the allowed ones)"
    ]


def test_hyperpod_version_without_pins_is_refused():
    """1.32 is supported by HyperPod and CDK, but this app pins no add-ons or kubectl for it."""
    assert "1.32" in versions.HYPERPOD_KUBERNETES_VERSIONS
    errors = errors_for(lambda d: d["eks"].update(kubernetes_version="1.32"))
    assert errors[0].startswith("eks.kubernetes_version: Kubernetes '1.32' is not supported; allowed: 1.33, 1.34 ")


def test_supported_versions_are_consistent():
    from aws_cdk import aws_eks_v2 as eks

    supported = versions.supported_kubernetes_versions()
    assert supported == ("1.33", "1.34")
    for v in supported:
        assert hasattr(eks.KubernetesVersion, "V" + v.replace(".", "_"))
        assert set(versions.ADDON_VERSIONS[v]) == {
            "vpc-cni",
            "kube-proxy",
            "coredns",
            "eks-pod-identity-agent",
            "aws-fsx-csi-driver",
            "amazon-cloudwatch-observability",
            "aws-secrets-store-csi-driver-provider",
        }
        # kube-proxy follows the cluster's minor version.
        assert versions.ADDON_VERSIONS[v]["kube-proxy"].startswith(f"v{v}.")
        # HyperPod needs VPC CNI >= 1.18.3.
        assert versions.semver(versions.ADDON_VERSIONS[v]["vpc-cni"]) >= versions.VPC_CNI_MINIMUM
        module, cls = versions.KUBECTL_LAYERS[v]
        minor = v.split(".")[1]
        assert module == f"aws_cdk.lambda_layer_kubectl_v{minor}" and cls == f"KubectlV{minor}Layer"
    assert versions.AUTHENTICATION_MODE in versions.HYPERPOD_AUTHENTICATION_MODES


def test_support_status_follows_the_eks_calendar():
    from datetime import date

    # 14 months of standard support, then 12 of extended (EKS's rule), for every listed minor.
    for v, (released, end_standard, end_extended) in versions.EKS_CALENDAR.items():
        months = lambda a, b: (b.year - a.year) * 12 + b.month - a.month  # noqa: E731
        assert months(released, end_standard) == 14 and months(end_standard, end_extended) == 12, v
    assert versions.eks_support_status("1.33", date(2026, 7, 28)) == "standard"
    assert versions.eks_support_status("1.33", date(2026, 7, 29)) == "extended"
    assert versions.eks_support_status("1.33", date(2027, 7, 29)) == "end-of-life"
    # On 2026-12-03 no minor that HyperPod supports is in standard support: 1.34 left it on 12-02.
    today = date(2026, 12, 3)
    assert [
        v for v in versions.HYPERPOD_KUBERNETES_VERSIONS if versions.eks_support_status(v, today) == "standard"
    ] == []
    assert versions.eks_support_status("1.35", today) == "standard"
    assert versions.eks_support_status("9.99", today) is None


def test_every_environment_runs_the_newest_kubernetes_that_hyperpod_supports():
    from config import load_environment

    newest = versions.newest_kubernetes_version()
    assert newest == max(versions.supported_kubernetes_versions(), key=lambda v: int(v.split(".")[1]))
    for name in ("dev", "staging", "prod"):
        assert load_environment(name).eks.kubernetes_version == newest, name
    assert versions.EKS_CALENDAR[newest][1] <= versions.SUPPORT_STATUS_AS_OF  # hence the acknowledgement


def test_production_on_extended_support_must_acknowledge_it():
    errors = errors_for(lambda d: d["eks"].pop("extended_support_acknowledged"), env="prod")
    assert errors == [
        "eks.extended_support_acknowledged: Kubernetes 1.34 left EKS standard support on 2026-12-02 and is in "
        "extended support until 2027-12-02, at $365.00 a month more than standard support (730 h x $0.60 "
        "instead of $0.10 per cluster-hour, config/prices.yaml); a production environment must acknowledge "
        "that (eks.extended_support_acknowledged: true) or use a version in standard support (none that "
        "HyperPod supports yet)"
    ]


def test_extended_support_needs_no_acknowledgement_outside_production():
    assert valid(lambda d: d["eks"].update(extended_support_acknowledged=False)).eks.kubernetes_version == "1.34"


def test_synth_never_reads_the_clock():
    """Support status (and so the acknowledgement, the warning and the cost) is evaluated on
    config/versions.py SUPPORT_STATUS_AS_OF: nothing that synth or the review runs asks for today."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    clock = re.compile(r"\b(date|datetime)\.(today|now|utcnow)\(|\btime\.time\(")
    offenders = [
        str(p.relative_to(root))
        for package in ("config", "constructs", "stacks", "review")
        for p in sorted((root / package).rglob("*.py"))
        if clock.search(p.read_text())
    ]
    assert offenders == []


def test_malformed_admin_arn():
    errors = errors_for(lambda d: d["eks"].update(admin_principal_arns=["arn:aws:iam::1234:role/Admin"]))
    assert errors == [
        "eks.admin_principal_arns: 'arn:aws:iam::1234:role/Admin' is not an IAM role or user ARN; "
        "expected arn:aws:iam::123456789012:role/NAME"
    ]


def test_public_endpoint_without_cidrs_in_prod():
    def mutate(d):
        d["eks"].update(endpoint_public_access=True, public_access_cidrs=[])

    errors = errors_for(mutate, env="prod")
    assert errors == [
        "eks.public_access_cidrs: a public endpoint (eks.endpoint_public_access: true) needs the CIDR "
        "blocks allowed to reach it; none given (an empty list would open it to 0.0.0.0/0)"
    ]


def test_public_endpoint_open_to_the_internet_in_prod():
    def mutate(d):
        d["eks"].update(endpoint_public_access=True, public_access_cidrs=["0.0.0.0/0"])

    errors = errors_for(mutate, env="prod")
    assert errors == [
        "eks.public_access_cidrs: 0.0.0.0/0 opens the production EKS endpoint to the whole internet; "
        "list the operators' CIDR blocks instead"
    ]


def test_cidrs_without_public_endpoint():
    errors = errors_for(lambda d: d["eks"].update(endpoint_public_access=False))
    assert errors == [
        "eks.public_access_cidrs: given while eks.endpoint_public_access is false; set the endpoint "
        "public or remove the CIDRs"
    ]


def test_kuberay_chart_older_than_1_2_0():
    errors = errors_for(lambda d: d["eks"].update(kuberay_chart_version="1.1.1"))
    assert errors == [
        "eks.kuberay_chart_version: KubeRay chart 1.1.1 is older than 1.2.0; before 1.2.0 the operator "
        "did not recreate an evicted Ray head pod (allowed: >= 1.2.0; pinned: 1.7.0)"
    ]


def test_kuberay_chart_not_a_release():
    errors = errors_for(lambda d: d["eks"].update(kuberay_chart_version="1.7.0-rc.1"))
    assert errors == [
        "eks.kuberay_chart_version: '1.7.0-rc.1' is not a KubeRay release version; expected "
        "MAJOR.MINOR.PATCH, e.g. 1.7.0"
    ]


def test_kuberay_1_2_0_is_accepted():
    assert valid(lambda d: d["eks"].update(kuberay_chart_version="1.2.0")).eks.kuberay_chart_version == "1.2.0"


def test_device_plugin_list_with_a_non_gpu_type():
    errors = errors_for(lambda d: d["eks"].update(gpu_device_plugin_instance_types=["ml.g5.12xlarge", "ml.m5.4xlarge"]))
    assert errors == [
        "eks.gpu_device_plugin_instance_types: 'ml.m5.4xlarge' is not a GPU instance type of HyperPod; "
        "the NVIDIA device plugin crash-loops on nodes without NVIDIA GPUs (allowed: the GPU types in "
        "config/catalog.py, e.g. ml.g5.12xlarge, ml.p5.48xlarge)"
    ]


def test_device_plugin_list_with_trainium_is_refused():
    errors = errors_for(lambda d: d["eks"].update(gpu_device_plugin_instance_types=["ml.trn1.32xlarge"]))
    assert errors[0].startswith("eks.gpu_device_plugin_instance_types: 'ml.trn1.32xlarge' is not a GPU instance type")


def test_system_node_instance_type_from_botocore():
    errors = errors_for(lambda d: d["eks"]["system_nodes"].update(instance_type="m7i.xxlarge"))
    assert len(errors) == 1
    assert errors[0].startswith("eks.system_nodes.instance_type: 'm7i.xxlarge' is not an EC2 instance type (botocore ")
    n = len(catalog.ec2_instance_types())
    assert errors[0].endswith(f"ec2 InstanceType enum, {n} values); did you mean 'm7i.xlarge'?")


def test_region_without_health_monitoring_agent_image():
    def mutate(d):
        d["region"] = "ca-west-1"
        d["network"]["availability_zones"] = [
            {"name": "ca-west-1a", "id": "caw1-az1"},
            {"name": "ca-west-1b", "id": "caw1-az2"},
        ]
        d["network"]["hyperpod_subnets"][0]["az_id"] = "caw1-az1"

    errors = errors_for(mutate)
    assert errors == [
        "region: AWS publishes the HyperPod health monitoring agent image in ap-northeast-1, "
        "ap-south-1, ap-southeast-1, ap-southeast-2, eu-central-1, eu-north-1, eu-west-1, eu-west-2, "
        "sa-east-1, us-east-1, us-east-2, us-west-1, us-west-2, not in ca-west-1"
    ]


def test_device_plugin_types_default_to_the_environments_gpu_groups():
    prod = valid(lambda d: None, env="prod")
    assert prod.gpu_device_plugin_instance_types() == ["ml.g6e.12xlarge", "ml.p5.48xlarge"]
    assert prod.efa_device_plugin_instance_types() == ["ml.g6e.12xlarge", "ml.p5.48xlarge"]
    explicit = valid(lambda d: d["eks"].update(gpu_device_plugin_instance_types=["ml.p5.48xlarge", "ml.g5.12xlarge"]))
    assert explicit.gpu_device_plugin_instance_types() == ["ml.g5.12xlarge", "ml.p5.48xlarge"]


def test_cpu_only_groups_get_no_efa_or_gpu_types():
    def mutate(d):
        d["hyperpod"]["instance_groups"][0]["instance_type"] = "ml.m5.4xlarge"
        # Training on a named group is checked at load time; a CPU-only cluster names none.
        del d["training"]["instance_group"]

    config = valid(mutate)
    assert config.gpu_device_plugin_instance_types() == []
    assert config.efa_device_plugin_instance_types() == []


def test_three_eks_mistakes_are_reported_together():
    def mutate(d):
        d["eks"].update(kubernetes_version="1.20", kuberay_chart_version="1.0.0", admin_principal_arns=["not-an-arn"])

    errors = errors_for(mutate)
    assert [e.split(":")[0] for e in errors] == [
        "eks.kubernetes_version",
        "eks.admin_principal_arns",
        "eks.kuberay_chart_version",
    ]
