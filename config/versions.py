"""Every version the platform pins: ONE place, each with its source and date.

Kubernetes versions and EKS's support calendar, EKS managed add-on versions, the kubectl Lambda
layer, Helm charts, the container images that this app installs on the cluster, and the tools of
the delivery pipeline's build projects. It stays one module on purpose, however long: "which
version, from where" has exactly one place to look. Changing a version is a one-line edit here;
tests in ``tests/config/test_eks_config.py`` keep the tables consistent with each other.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------------------------

# SageMaker HyperPod (EKS orchestrator) supports these Kubernetes versions. Source: "Getting
# started with Amazon EKS support in SageMaker HyperPod" (sagemaker-hyperpod-eks-prerequisites)
# lists 1.28, 1.29, 1.30, 1.31, 1.32, 1.33 and 1.34. No AWS page found lists 1.35
# for HyperPod, although EKS offers it and its kubectl layer (aws-cdk.lambda-layer-kubectl-v35)
# is on PyPI: HyperPod's list decides.
HYPERPOD_KUBERNETES_VERSIONS: tuple[str, ...] = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34")

# HyperPod's authentication-mode requirement (same page): API or API_AND_CONFIG_MAP.
HYPERPOD_AUTHENTICATION_MODES: tuple[str, ...] = ("API", "API_AND_CONFIG_MAP")
AUTHENTICATION_MODE = "API_AND_CONFIG_MAP"

# HyperPod requires the Amazon VPC CNI plugin 1.18.3 or later (same page).
VPC_CNI_MINIMUM = (1, 18, 3)

# The kubectl/helm Lambda layer the CDK kubectl provider runs (PyPI
# aws-cdk.lambda-layer-kubectl-vNN, pinned in requirements.in). kubectl supports one minor
# version of skew each way; this app keeps the layer at the cluster's own minor version.
# Value: (module, class). Only layers installed from requirements.lock are listed.
KUBECTL_LAYERS: dict[str, tuple[str, str]] = {
    "1.33": ("aws_cdk.lambda_layer_kubectl_v33", "KubectlV33Layer"),
    "1.34": ("aws_cdk.lambda_layer_kubectl_v34", "KubectlV34Layer"),
}

# EKS managed add-on versions per Kubernetes minor version. kube-proxy and coredns follow the
# cluster's minor version, so a new Kubernetes version needs a new row here. EKS is the authority:
# `hpray preflight` checks every pin of the environment's version against eks:DescribeAddonVersions
# (a FAIL names the builds EKS offers for that minor) before any deploy, the pipeline's pre-deploy
# step runs the same check per stage, and `hpray upgrade plan --apply` checks the target's row.
# Offline evidence for each pin (the sources; no call of this repository's tests reaches AWS):
# - coredns v1.12.4-eksbuild.1: the EKS user guide's CoreDNS version table lists it for 1.33 and 1.34
#   (managing-coredns.html).
# - kube-proxy v1.33.3-eksbuild.10: the build the EKS API lists for 1.33 (awsdocs/amazon-eks-user-guide
#   PR 1168, versions taken from describe-addon-versions); v1.34.0-eksbuild.2: the 1.34 pin of
#   awslabs/cdk-eks-blueprints (lib/addons/kube-proxy); later 1.34 builds exist.
# - eks-pod-identity-agent v1.3.8-eksbuild.2: describe-addon-versions for 1.34 in cdk-eks-blueprints
#   PR 1224, and its 1.33 pin.
# - amazon-cloudwatch-observability v4.10.1-eksbuild.1: cdk-eks-blueprints' pin for 1.33 and 1.34
#   (lib/addons/cloud-watch-insights).
# - vpc-cni v1.20.3-eksbuild.1: published 1.33 and 1.34 cluster configs only (no AWS table lists it;
#   EKS offers one vpc-cni build for every supported minor).
# - aws-fsx-csi-driver v1.7.0-eksbuild.1: the build exists (EKS user guide PR 1215, hybrid nodes),
#   but no source found states its 1.33/1.34 compatibility: `hpray preflight` fails on it until EKS
#   offers it for the environment's minor (aws eks describe-addon-versions --kubernetes-version 1.34
#   --addon-name NAME lists what it offers).
# The Secrets Store CSI driver with the AWS provider (ASCP), one EKS add-on
# (Secrets Manager user guide, "Install ASCP for Amazon EKS", ascp-eks-installation.html). The
# add-on packages ASCP's Helm chart, which brings the driver as a subchart: ASCP v3.1.1's chart
# (aws/secrets-store-csi-driver-provider-aws@5f47771, charts/.../Chart.lock) bundles
# secrets-store-csi-driver 1.6.0, whose chart needs Kubernetes >= 1.30. v3.1.1-eksbuild.2 is the
# build published EKS configurations pin; the same build serves 1.33 and 1.34 (add-on builds
# of ASCP are not per Kubernetes minor). NOT cross-checked offline, like the rows below.
SECRETS_STORE_ADDON = "v3.1.1-eksbuild.2"

ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {
        "vpc-cni": "v1.20.3-eksbuild.1",
        "kube-proxy": "v1.33.3-eksbuild.10",
        "coredns": "v1.12.4-eksbuild.1",
        "eks-pod-identity-agent": "v1.3.8-eksbuild.2",
        "aws-fsx-csi-driver": "v1.7.0-eksbuild.1",
        "amazon-cloudwatch-observability": "v4.10.1-eksbuild.1",
        "aws-secrets-store-csi-driver-provider": SECRETS_STORE_ADDON,
    },
    "1.34": {
        "vpc-cni": "v1.20.3-eksbuild.1",
        "kube-proxy": "v1.34.0-eksbuild.2",
        "coredns": "v1.12.4-eksbuild.1",
        "eks-pod-identity-agent": "v1.3.8-eksbuild.2",
        "aws-fsx-csi-driver": "v1.7.0-eksbuild.1",
        "amazon-cloudwatch-observability": "v4.10.1-eksbuild.1",
        "aws-secrets-store-csi-driver-provider": SECRETS_STORE_ADDON,
    },
}

# EKS's release calendar (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html):
# a minor is in standard support for 14 months after its EKS release, then in
# extended support (billed at a higher per-cluster-hour rate: config/prices.yaml) for 12 more,
# after which EKS upgrades the cluster itself. Dates: (release, end of standard, end of extended).
EKS_CALENDAR: dict[str, tuple[date, date, date]] = {
    "1.31": (date(2024, 9, 26), date(2025, 11, 26), date(2026, 11, 26)),
    "1.32": (date(2025, 1, 23), date(2026, 3, 23), date(2027, 3, 23)),
    "1.33": (date(2025, 5, 29), date(2026, 7, 29), date(2027, 7, 29)),
    "1.34": (date(2025, 10, 2), date(2026, 12, 2), date(2027, 12, 2)),
    "1.35": (date(2026, 1, 27), date(2027, 3, 27), date(2028, 3, 27)),
}
STANDARD, EXTENDED, END_OF_LIFE = "standard", "extended", "end-of-life"

# The day on which config validation, synth and the review evaluate the calendar above. Pinned,
# never the clock: the same commit synthesizes the same assembly on any day. Move it forward
# whenever the calendar or HYPERPOD_KUBERNETES_VERSIONS is re-checked (`hpray preflight` and
# `hpray upgrade plan` read EKS's own status and today's date instead).
SUPPORT_STATUS_AS_OF = date(2026, 12, 4)

# What an EKS cluster does at the end of its version's standard support
# (AWS::EKS::Cluster UpgradePolicy.SupportType): EXTENDED keeps the version (extended-support
# price); STANDARD lets EKS upgrade the control plane by itself, to a minor that HyperPod may not
# support yet and past the add-on, node and HyperPod AMI upgrades of `hpray upgrade plan`. This
# platform always writes EXTENDED and upgrades on its own schedule.
EKS_SUPPORT_TYPE = "EXTENDED"


def eks_support_status(version: str, on: date) -> str | None:
    """``standard``, ``extended`` or ``end-of-life`` for Kubernetes ``version`` on EKS on the day
    ``on``; None for a version the calendar above does not list."""
    dates = EKS_CALENDAR.get(version)
    if dates is None:
        return None
    _, end_standard, end_extended = dates
    if on < end_standard:
        return STANDARD
    return EXTENDED if on < end_extended else END_OF_LIFE


def in_extended_support(version: str, on: date = SUPPORT_STATUS_AS_OF) -> bool:
    """``version`` is past EKS's end of standard support on ``on`` (extended support or later)."""
    return eks_support_status(version, on) in (EXTENDED, END_OF_LIFE)


def newest_kubernetes_version() -> str:
    """The newest minor that HyperPod supports and this file pins add-ons and kubectl for."""
    return max(supported_kubernetes_versions(), key=lambda v: tuple(int(p) for p in v.split(".")))


def next_minor(version: str) -> str:
    major, minor = version.split(".")
    return f"{major}.{int(minor) + 1}"


def supported_kubernetes_versions() -> tuple[str, ...]:
    """Versions HyperPod supports and this file pins add-ons and a kubectl layer for. Every pinned
    version is also one the pinned aws-cdk-lib knows (``eks.KubernetesVersion.V1_NN``):
    tests/config/test_eks_config.py checks it, so config validation needs no CDK import."""
    return tuple(v for v in HYPERPOD_KUBERNETES_VERSIONS if v in ADDON_VERSIONS and v in KUBECTL_LAYERS)


# ---------------------------------------------------------------------------------------------
# Helm charts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChartPin:
    chart: str
    repository: str
    version: str


# KubeRay operator (https://ray-project.github.io/kuberay-helm/ index), newest stable release when
# pinned. KUBERAY_CRDS below are the CRDs of its crds/ folder (ops/upgrade/kuberay_crds.py checks them): change them together.
KUBERAY_OPERATOR = ChartPin("kuberay-operator", "https://ray-project.github.io/kuberay-helm/", "1.7.0")
# The operator image of a KubeRay release is tagged v<chart version> (the chart's appVersion).
KUBERAY_OPERATOR_IMAGE = "quay.io/kuberay/operator"
# KubeRay before 1.2.0 did not recreate a Ray head pod that was evicted (KubeRay 1.2.0 release
# notes): with HyperPod replacing unhealthy nodes, an older operator could lose the head for good.
KUBERAY_MINIMUM = (1, 2, 0)

# ElastiCache for Valkey of the RayServices' GCS fault tolerance (constructs/gcs_store.py); one of
# the engine versions CloudFormation accepts for Engine: valkey (cfn-lint checks it).
GCS_STORE_ENGINE = "valkey"
GCS_STORE_ENGINE_VERSION = "8.1"

# NVIDIA device plugin (https://nvidia.github.io/k8s-device-plugin index).
NVIDIA_DEVICE_PLUGIN = ChartPin("nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin", "0.18.2")

# AWS EFA device plugin (https://aws.github.io/eks-charts index; the chart's versions carry a
# leading "v"). v0.5.20 is the release AWS's HyperPod dependency chart pins.
EFA_DEVICE_PLUGIN = ChartPin("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.20")

# ---------------------------------------------------------------------------------------------
# Chart and CRD sources, for rendering with the real helm (tests, and the placement check)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcePin:
    """One folder of a public Git repository at a pinned commit, checked by a content digest.

    ``digest`` is ``artifacts.pinned.tree_digest`` of the folder (every file, or only ``files``):
    SHA-256 over ``<relative path>\0<SHA-256 of the file>\n`` lines in path order. It is
    independent of how the folder was obtained (a GitHub tarball, a Git checkout, a local copy).
    ``folder`` names the copy: ``sources/<folder>-<commit>`` in the artifact cache, and its folder
    in the shared test folder (tests/shared_artifacts.py).
    """

    folder: str
    repository: str  # owner/name on GitHub
    commit: str
    path: str
    digest: str
    files: tuple[str, ...] = ()


# Digests of the upstream Git trees at these commits (tags v1.7.0 and v0.18.2).
CHART_SOURCES: dict[str, SourcePin] = {
    "kuberay-operator": SourcePin(
        "kuberay-operator-1.7.0",
        "ray-project/kuberay",
        "59d663aeec13760646da3db9c1cf8cfe883e30b7",
        "helm-chart/kuberay-operator",
        "23d81bf08b7d16457cb8e6c9397198c24a05164318ce229aeabc94c5d84ce444",
    ),
    "nvidia-device-plugin": SourcePin(
        "nvidia-device-plugin-0.18.2",
        "NVIDIA/k8s-device-plugin",
        "fb1242add205d8563f9c604b8ba239607b4083e6",
        "deployments/helm/nvidia-device-plugin",
        "0e79258a4cbf2e06eb9987fe4a0e30d7455f0bd42b6d91e1a2572375fce8cba5",
    ),
    "aws-efa-k8s-device-plugin": SourcePin(
        "aws-efa-k8s-device-plugin-v0.5.20",
        "aws/eks-charts",
        "de5fdc1dae279f99c00e9fcac24b9a894dbc052f",
        "stable/aws-efa-k8s-device-plugin",
        "471bb751655801eee3f9f4c64445030738b82d6bb3598e54f79b1c589fab90ca",
    ),
    # AWS's HyperPod dependency chart: what constructs/hyperpod_dependencies.py mirrors.
    "hyperpod-helm-chart": SourcePin(
        "hyperpod-helm-chart-011ca92",
        "aws/sagemaker-hyperpod-cli",
        "011ca927123e02b35a399935bbb3ab1905fe33c7",
        "helm_chart/HyperPodHelmChart",
        "37ac2ae3258568c082d4d868825adb450ab707d94c6d64929c1f542ff4f693bc",
    ),
}
# The KubeRay CRDs of the pinned operator release (same commit as its chart).
KUBERAY_CRDS = SourcePin(
    "kuberay-crds",
    "ray-project/kuberay",
    "59d663aeec13760646da3db9c1cf8cfe883e30b7",
    "ray-operator/config/crd/bases",
    "56f86b9a0d804013e0b88b80e718bdb95f359a500d865efeb72f5100a54be602",
    files=("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml"),
)

# The SecretProviderClass CRD of the Secrets Store CSI driver the add-on bundles (driver chart
# 1.6.0, tag v1.6.0, Apache-2.0), for validating the rendered SecretProviderClass offline. Not in
# ../shared: fetched once from GitHub into the cache where the network allows, else the test that
# needs it is skipped with the reason.
SECRETS_STORE_CRDS = SourcePin(
    "secrets-store-csi-driver-crds-v1.6.0",
    "kubernetes-sigs/secrets-store-csi-driver",
    "4960f9637c51ad9cb9ef264481bc6d9a98bf1f1c",
    "charts/secrets-store-csi-driver/crds",
    "bf77bd80f6fe8764d71a9bc1b0fd3646c527653fe4dae501dd5ea8015cdbe709",
    files=("secrets-store.csi.x-k8s.io_secretproviderclasses.yaml",),
)

# ---------------------------------------------------------------------------------------------
# Container images of the manifests this app writes itself
# ---------------------------------------------------------------------------------------------

# HyperPod health monitoring agent: published by AWS in one ECR registry per region (account IDs
# and tag from the health-monitoring-agent subchart of AWS's HyperPod dependency chart at the
# commit pinned in CHART_SOURCES["hyperpod-helm-chart"]). AWS publishes no public chart
# repository for it, so this app writes the DaemonSet itself (docs/architecture.md); the tag and the
# DaemonSet's shape (no args since 1.0.1038.0) change together with that pin, and
# tests/constructs/test_hyperpod_dependencies.py compares them with the chart rendered.
HEALTH_MONITORING_AGENT_TAG = "1.0.1892.0_1.0.424.0"
HEALTH_MONITORING_AGENT_REGISTRIES: dict[str, str] = {
    "us-east-1": "767398015722",
    "us-west-2": "905418368575",
    "us-east-2": "851725546812",
    "us-west-1": "011528288828",
    "eu-central-1": "211125453373",
    "eu-north-1": "654654141839",
    "eu-west-1": "533267293120",
    "eu-west-2": "011528288831",
    "ap-northeast-1": "533267052152",
    "ap-south-1": "011528288864",
    "ap-southeast-1": "905418428165",
    "ap-southeast-2": "851725636348",
    "sa-east-1": "025066253954",
}


def health_monitoring_agent_image(region: str) -> str:
    account = HEALTH_MONITORING_AGENT_REGISTRIES[region]
    return f"{account}.dkr.ecr.{region}.amazonaws.com/hyperpod-health-monitoring-agent:{HEALTH_MONITORING_AGENT_TAG}"


# ---------------------------------------------------------------------------------------------
# Where network.images_from_ecr pulls images from: only ECR
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PullThroughCache:
    """One ECR pull-through cache rule (AWS::ECR::PullThroughCacheRule): images of ``registry``
    are pulled as ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<repository>:<tag>``."""

    registry: str  # how image references name the upstream registry
    upstream_url: str  # the rule's UpstreamRegistryUrl
    upstream_registry: str  # the rule's UpstreamRegistry
    prefix: str  # the rule's EcrRepositoryPrefix
    needs_credentials: bool  # ECR requires a Secrets Manager secret "ecr-pullthroughcache/..."


# ECR caches these upstreams: ECR, ECR Public, Docker Hub, GitHub/GitLab container registries,
# registry.k8s.io, Azure Container Registry and Quay (ECR API reference, CreatePullThroughCacheRule
# UpstreamRegistryUrl); Docker Hub, GitHub, GitLab and Azure only with credentials. nvcr.io is not
# one of them.
PULL_THROUGH_CACHES: tuple[PullThroughCache, ...] = (
    PullThroughCache("quay.io", "quay.io", "quay", "quay", needs_credentials=False),  # the KubeRay operator
    PullThroughCache(
        "docker.io", "registry-1.docker.io", "docker-hub", "docker-hub", needs_credentials=True
    ),  # ray-llm
)
# The NVIDIA device plugin is only published on nvcr.io, which ECR cannot cache. Where
# network.images_from_ecr is on, `cdk deploy` builds it as a CDK Docker image asset whose
# Dockerfile is only `FROM` this reference (images/nvidia-device-plugin/Dockerfile,
# constructs/device_plugin_image.py) and publishes it into the CDK assets repository before the
# cluster stack deploys: the image is in ECR before the first HyperPod node comes up. The tag is the
# chart's appVersion (NVIDIA_DEVICE_PLUGIN above). The digest is the one two independent public
# deployments pin for nvcr.io/nvidia/k8s-device-plugin:v0.18.2 (NVIDIA publishes no digest list);
# the build pulls by digest, so a wrong digest fails `cdk deploy` before anything is created. Check it
# with `docker buildx imagetools inspect nvcr.io/nvidia/k8s-device-plugin:v0.18.2` when bumping.
NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_TAG = f"v{NVIDIA_DEVICE_PLUGIN.version}"
NVIDIA_DEVICE_PLUGIN_DIGEST = "sha256:b5788e29e7ae5272de8de863ebe386d6611e608421a6ecc5b4e7d5952aba637f"


def nvidia_device_plugin_upstream() -> str:
    """The pinned upstream reference (``repository:tag@digest``) the asset is built FROM."""
    return f"{NVIDIA_DEVICE_PLUGIN_IMAGE}:{NVIDIA_DEVICE_PLUGIN_TAG}@{NVIDIA_DEVICE_PLUGIN_DIGEST}"


# The EFA device plugin image lives in the EKS add-on registry of every region (the chart's
# default names us-west-2's, which a VPC's endpoints in another region cannot reach).
EKS_ADDON_REGISTRY_ACCOUNT = "602401143452"
EFA_DEVICE_PLUGIN_REPOSITORY = "eks/aws-efa-k8s-device-plugin"


def ecr_registry(account: str, region: str) -> str:
    return f"{account}.dkr.ecr.{region}.amazonaws.com"


def efa_device_plugin_repository(region: str) -> str:
    return f"{ecr_registry(EKS_ADDON_REGISTRY_ACCOUNT, region)}/{EFA_DEVICE_PLUGIN_REPOSITORY}"


def _pull_through(image: str) -> tuple[PullThroughCache, str] | None:
    """The rule that caches ``image`` (``registry/repository[:tag]``) and the image's path under
    the rule's prefix; None if no rule covers its registry."""
    first, _, rest = image.partition("/")
    registry, path = (first, rest) if "." in first else ("docker.io", image)
    return next(((cache, path) for cache in PULL_THROUGH_CACHES if registry == cache.registry), None)


def pull_through_repository(image: str) -> str:
    """The repository of this account's registry that a pull-through cache rule imports
    ``image`` into (``<prefix>/<repository>``, no tag)."""
    found = _pull_through(image)
    if found is None:
        raise ValueError(f"image {image!r}: no pull-through cache rule covers it")
    cache, path = found
    return f"{cache.prefix}/{path.partition(':')[0]}"


def ecr_image(image: str, *, account: str, region: str) -> str:
    """The ECR reference that network.images_from_ecr pulls ``image`` (``registry/repository[:tag]``) from:
    through a pull-through cache rule, or unchanged if it is in ECR. (The NVIDIA device plugin is a
    CDK asset instead: constructs/device_plugin_image.py.)"""
    found = _pull_through(image)
    if found is not None:
        return f"{ecr_registry(account, region)}/{found[0].prefix}/{found[1]}"
    registry = image.partition("/")[0]
    if registry.endswith(".amazonaws.com") and ".dkr.ecr." in registry:
        return image
    raise ValueError(
        f"image {image!r}: network.images_from_ecr pulls only from ECR, and no pull-through cache rule "
        f"covers {registry}; covered: {', '.join(c.registry for c in PULL_THROUGH_CACHES)}, ECR"
    )


# ---------------------------------------------------------------------------------------------
# The delivery pipeline's CodeBuild projects
# ---------------------------------------------------------------------------------------------

PACKAGE_JSON = Path(__file__).resolve().parents[1] / "package.json"


def cdk_cli_version() -> str:
    """The AWS CDK CLI version package.json pins (``npm ci`` installs it for ``make synth``); the
    pipeline's generated projects (self-mutation, security check) install the same one."""
    return str(json.loads(PACKAGE_JSON.read_text())["devDependencies"]["aws-cdk"])


# cdk-assets, which the pipeline's asset-publishing projects install (npm package cdk-assets,
# versioned apart from the CLI): the registry's `latest` dist-tag when pinned (`npm view
# cdk-assets dist-tags`), i.e. what CDK Pipelines' unpinned default installed then.
CDK_ASSETS_VERSION = "4.7.3"

# The image of every CodeBuild project of the pipeline (CDK Pipelines' default, named here):
# Ubuntu 22.04. Its own Python 3.11 runtime matches the version the locks are resolved with.
PIPELINE_BUILD_IMAGE = "aws/codebuild/standard:7.0"
PIPELINE_PYTHON_RUNTIME = "3.11"
PIPELINE_NODEJS_RUNTIME = "20"  # runs npm ci, which installs the pinned Node 22 (package.json)


@dataclass(frozen=True)
class ReleaseTarball:
    """An upstream release archive, checked by SHA-256 before anything in it is used."""

    url: str
    sha256: str
    binaries: tuple[str, ...]  # paths inside the archive installed into /usr/local/bin


# promtool and amtool for the document checks of `make synth`/`make pipeline`, from the upstream
# releases: Ubuntu 22.04's packages (prometheus 2.31, prometheus-alertmanager 0.23) are older than
# the Debian 12 ones the checks are run with in development (2.42.0, 0.25.0). Checksums: the
# releases' sha256sums.txt as quoted by public build files (alertmanager 0.25.0 by two
# independent ones; prometheus 2.43.0 by one; no public copy of 2.42.0's was found, so the
# pipeline runs the next minor).
PROMETHEUS_RELEASE = ReleaseTarball(
    "https://github.com/prometheus/prometheus/releases/download/v2.43.0/prometheus-2.43.0.linux-amd64.tar.gz",
    "cfea92d07dfd9a9536d91dff6366d897f752b1068b9540b3e2669b0281bb8ebf",
    ("prometheus-2.43.0.linux-amd64/promtool",),
)
ALERTMANAGER_RELEASE = ReleaseTarball(
    "https://github.com/prometheus/alertmanager/releases/download/v0.25.0/alertmanager-0.25.0.linux-amd64.tar.gz",
    "206cf787c01921574ca171220bb9b48b043c3ad6e744017030fed586eb48e04b",
    ("alertmanager-0.25.0.linux-amd64/amtool",),
)


def release_install_commands(release: ReleaseTarball) -> list[str]:
    """Shell commands that download ``release``, refuse it unless its SHA-256 matches, and put
    its binaries into /usr/local/bin."""
    archive = "/tmp/" + release.url.rsplit("/", 1)[-1]
    return [
        f"curl -fsSL --retry 3 -o {archive} {release.url}",
        f'echo "{release.sha256}  {archive}" | sha256sum -c -',
        f"tar -xzf {archive} -C /usr/local/bin --strip-components=1 {' '.join(release.binaries)}",
    ]


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

_SEMVER_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$")


def semver(value: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release version such as 1.7.0 or v1.20.4-eksbuild.1, else None."""
    m = _SEMVER_RE.match(value)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))
