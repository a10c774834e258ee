"""Facts about AWS that the config is validated against, each with its source.

The HyperPod instance-type list is read from the installed botocore service model (never copied);
per-type hardware facts (GPUs, EFA interfaces, vCPUs, memory) come from the EC2 accelerated
computing instance pages and the HyperPod EFA table. It stays one module: every fact looked up by
instance type or chip (the config's checks, the sizing plan and the review's prices read them),
each beside its source.
"""

from __future__ import annotations

import difflib
import functools
import gzip
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

# The KubeRay operator chart version lives with every other EKS-side pin in config/versions.py.
from config.versions import KUBERAY_OPERATOR as _KUBERAY_OPERATOR

KUBERAY_CHART_VERSION = _KUBERAY_OPERATOR.version

# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy, days).
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)

# FSx for Lustre PERSISTENT_2 per-unit storage throughput, MB/s per TiB (FSx API reference,
# CreateFileSystemLustreConfiguration.PerUnitStorageThroughput).
FSX_PERSISTENT_2_THROUGHPUT = (125, 250, 500, 1000)


def _botocore_data_dir() -> Path:
    spec = importlib.util.find_spec("botocore")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("botocore is not installed; it is pinned in requirements.lock")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


@functools.cache
def service_enum(service: str, shape: str) -> tuple[str, ...]:
    """The values of enum ``shape`` in the installed botocore's newest ``service`` model.

    Reads the one shape out of the model file without importing botocore or parsing the whole
    model (EC2's is 4 MB of JSON): that took a third of a second of every synth. It reads the same
    file botocore's loader would (the newest API version under botocore/data); the tests compare
    the result with botocore's own parsed model.
    """
    service_dir = _botocore_data_dir() / service
    versions = sorted(d.name for d in service_dir.iterdir() if (d / "service-2.json.gz").exists())
    if not versions:
        raise RuntimeError(f"botocore has no {service} service model under {service_dir}")
    with gzip.open(service_dir / versions[-1] / "service-2.json.gz", "rt", encoding="utf-8") as f:
        text = f.read()
    # A shape definition (not a member reference, which has "shape" instead of "type").
    match = re.search(r'"' + re.escape(shape) + r'"\s*:\s*(?=\{\s*"type"\s*:\s*"string"\s*,\s*"enum")', text)
    if match is None:
        model = json.loads(text)
        definition = model["shapes"][shape]
    else:
        definition, _ = json.JSONDecoder().raw_decode(text, match.end())
    return tuple(definition["enum"])


def hyperpod_instance_types() -> tuple[str, ...]:
    """Every value of the ``ClusterInstanceType`` enum in the installed botocore."""
    return service_enum("sagemaker", "ClusterInstanceType")


def ec2_instance_types() -> tuple[str, ...]:
    """Every value of EC2's ``InstanceType`` enum in the installed botocore."""
    return service_enum("ec2", "InstanceType")


def require_enum_value(value: str, *, service: str, shape: str, what: str) -> str:
    """``value`` if it is in botocore's ``service`` ``shape`` enum, else a ValueError that names
    the source, the number of values and the closest one."""
    allowed = service_enum(service, shape)
    if value in allowed:
        return value
    close = closest(value, allowed)
    hint = f"; did you mean {close!r}?" if close else ""
    raise ValueError(
        f"{value!r} is not {what} (botocore {botocore_version()} {service} {shape} enum, {len(allowed)} values){hint}"
    )


def botocore_version() -> str:
    from importlib.metadata import version

    return version("botocore")


def closest(value: str, choices: tuple[str, ...] | list[str]) -> str | None:
    match = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


@dataclass(frozen=True)
class InstanceSpec:
    vcpus: int
    memory_gib: int
    gpus: int = 0
    efa_interfaces: int = 0
    accelerator: str = ""
    # Hardware threads per core with multithreading on: 2 on the Intel and AMD types here.
    threads_per_core: int = 2
    gpu_memory_gib: int = 0  # per GPU

    def vcpus_at(self, threads_per_core: int) -> int:
        """vCPUs the OS sees with ``threads_per_core`` (HyperPod ThreadsPerCore; 1: one vCPU per
        physical core)."""
        return self.vcpus // self.threads_per_core * min(threads_per_core, self.threads_per_core)


# Memory of one GPU, GiB: each EC2 accelerated instance page's total GPU memory divided by its
# GPU count (e.g. p5.48xlarge 640 GiB / 8, p5e.48xlarge 1128 GiB / 8).
GPU_MEMORY_GIB: dict[str, int] = {
    "A100": 40,
    "A100-80GB": 80,
    "H100": 80,
    "H200": 141,
    "B200": 179,
    "B300": 268,
    "GB200": 185,
    "A10G": 24,
    "L4": 24,
    "L40S": 48,
    "RTX PRO 6000": 96,
}


# Dense (no sparsity) bf16 Tensor Core peak of one GPU, TFLOP/s, from NVIDIA's datasheets, which
# headline the figure with 2:4 sparsity (A100 624, H100/H200 SXM 1,979, B200 4,500, L4 242;
# L40S: 362.05 dense, 733 sparse). The A10G, AWS's variant of the A10, has its own datasheet
# (NVIDIA A10G for AWS, https://d1.awsstatic.com/product-marketing/ec2/NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022.pdf):
# 70 TFLOP/s bf16/fp16 dense, as Baseten's A10 vs A10G spec comparison reads it
# (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/: "the standard A10 boasts
# 125 TF of compute, while the A10G only has 70 TF"). The A10's own datasheet gives 125, which some
# tables copy for the A10G; the A10G's spec sheet is the one taken. MFU figures
# (bench/training_gpu.py), the sizing plan's step time and the review's cost per million tokens
# divide by it. Chips not here get no step-time estimate and no token cost.
GPU_DENSE_BF16_TFLOPS: dict[str, float] = {
    "A100": 312.0,
    "A100-80GB": 312.0,
    "H100": 989.5,
    "H200": 989.5,
    "B200": 2250.0,
    "A10G": 70.0,
    "L4": 121.0,
    "L40S": 362.05,
}


# Chips with FP8 Tensor Cores (float8 training, training.float8): Hopper (H100, H200), Ada
# (L40S, L4) and Blackwell (B200, B300, GB200), per NVIDIA's datasheets (H100 "FP8 Tensor Core
# 3,958 teraFLOPS" with sparsity; L40S "FP8 1,466 TFLOPS"; L4 "FP8 485 TFLOPS"). Ampere (A100,
# A10G) has none: its Tensor Cores stop at bf16/fp16/int8.
GPU_HAS_FP8: frozenset[str] = frozenset({"H100", "H200", "B200", "B300", "GB200", "L4", "L40S"})


def has_fp8(instance_type: str) -> bool:
    """Whether the GPUs of ``instance_type`` have FP8 Tensor Cores (``GPU_HAS_FP8``)."""
    return instance_spec(instance_type).accelerator in GPU_HAS_FP8


def dense_bf16_tflops(instance_type: str) -> float | None:
    """The dense bf16 peak of one GPU of ``instance_type`` (None: no figure for its chip)."""
    return GPU_DENSE_BF16_TFLOPS.get(instance_spec(instance_type).accelerator)


# Memory bandwidth of one GPU, GB/s (decimal), from each chip's datasheet: A100 40GB 1,555 and
# A100 80GB 2,039 (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf),
# H100 SXM 3.35 TB/s (https://www.nvidia.com/en-us/data-center/h100/), H200 SXM 4.8 TB/s
# (https://www.nvidia.com/en-us/data-center/h200/), B200 8 TB/s (DGX B200: 64 TB/s over 8 GPUs,
# https://www.nvidia.com/en-us/data-center/dgx-b200/), A10G 600 (the A10G datasheet above; the
# same GDDR6 as the A10), L4 300 (https://www.nvidia.com/en-us/data-center/l4/), L40S 864
# (https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413). Decoding reads every weight once
# per step, so the review's cost per million generated tokens divides by it; chips not here are
# not priced.
GPU_MEMORY_BANDWIDTH_GBPS: dict[str, float] = {
    "A100": 1555.0,
    "A100-80GB": 2039.0,
    "H100": 3350.0,
    "H200": 4800.0,
    "B200": 8000.0,
    "A10G": 600.0,
    "L4": 300.0,
    "L40S": 864.0,
}


def memory_bandwidth_gbps(instance_type: str) -> float | None:
    """The memory bandwidth of one GPU of ``instance_type``, GB/s (None: no figure for its chip)."""
    return GPU_MEMORY_BANDWIDTH_GBPS.get(instance_spec(instance_type).accelerator)


# Accelerated instance types HyperPod offers: (GPUs, vCPUs, memory GiB, EFA interfaces, chip).
_ACCELERATED: dict[str, tuple[int, int, int, int, str]] = {
    "ml.p4d.24xlarge": (8, 96, 1152, 4, "A100"),
    "ml.p4de.24xlarge": (8, 96, 1152, 4, "A100-80GB"),
    "ml.p5.4xlarge": (1, 16, 256, 0, "H100"),
    "ml.p5.48xlarge": (8, 192, 2048, 32, "H100"),
    "ml.p5e.48xlarge": (8, 192, 2048, 32, "H200"),
    "ml.p5en.48xlarge": (8, 192, 2048, 16, "H200"),
    "ml.p6-b200.48xlarge": (8, 192, 2048, 8, "B200"),
    "ml.p6-b300.48xlarge": (8, 192, 4096, 16, "B300"),
    "ml.p6e-gb200.36xlarge": (4, 144, 960, 17, "GB200"),
    "ml.g5.xlarge": (1, 4, 16, 0, "A10G"),
    "ml.g5.2xlarge": (1, 8, 32, 0, "A10G"),
    "ml.g5.4xlarge": (1, 16, 64, 0, "A10G"),
    "ml.g5.8xlarge": (1, 32, 128, 1, "A10G"),
    "ml.g5.12xlarge": (4, 48, 192, 1, "A10G"),
    "ml.g5.16xlarge": (1, 64, 256, 1, "A10G"),
    "ml.g5.24xlarge": (4, 96, 384, 1, "A10G"),
    "ml.g5.48xlarge": (8, 192, 768, 1, "A10G"),
    "ml.g6.xlarge": (1, 4, 16, 0, "L4"),
    "ml.g6.2xlarge": (1, 8, 32, 0, "L4"),
    "ml.g6.4xlarge": (1, 16, 64, 0, "L4"),
    "ml.g6.8xlarge": (1, 32, 128, 1, "L4"),
    "ml.g6.12xlarge": (4, 48, 192, 1, "L4"),
    "ml.g6.16xlarge": (1, 64, 256, 1, "L4"),
    "ml.g6.24xlarge": (4, 96, 384, 1, "L4"),
    "ml.g6.48xlarge": (8, 192, 768, 1, "L4"),
    "ml.gr6.4xlarge": (1, 16, 128, 0, "L4"),
    "ml.gr6.8xlarge": (1, 32, 256, 1, "L4"),
    "ml.g6e.xlarge": (1, 4, 32, 0, "L40S"),
    "ml.g6e.2xlarge": (1, 8, 64, 0, "L40S"),
    "ml.g6e.4xlarge": (1, 16, 128, 0, "L40S"),
    "ml.g6e.8xlarge": (1, 32, 256, 1, "L40S"),
    "ml.g6e.12xlarge": (4, 48, 384, 1, "L40S"),
    "ml.g6e.16xlarge": (1, 64, 512, 1, "L40S"),
    "ml.g6e.24xlarge": (4, 96, 768, 2, "L40S"),
    "ml.g6e.48xlarge": (8, 192, 1536, 4, "L40S"),
    "ml.g7e.2xlarge": (1, 8, 64, 0, "RTX PRO 6000"),
    "ml.g7e.4xlarge": (1, 16, 128, 0, "RTX PRO 6000"),
    "ml.g7e.8xlarge": (1, 32, 256, 1, "RTX PRO 6000"),
    "ml.g7e.12xlarge": (2, 48, 512, 1, "RTX PRO 6000"),
    "ml.g7e.24xlarge": (4, 96, 1024, 2, "RTX PRO 6000"),
    "ml.g7e.48xlarge": (8, 192, 2048, 4, "RTX PRO 6000"),
    # Trainium: Neuron devices, not nvidia.com/gpu.
    "ml.trn1.32xlarge": (0, 128, 512, 8, "Trainium"),
    "ml.trn1n.32xlarge": (0, 128, 512, 16, "Trainium"),
    "ml.trn2.3xlarge": (0, 12, 128, 1, "Trainium2"),
    "ml.trn2.48xlarge": (0, 192, 2048, 16, "Trainium2"),
}

# GiB of memory per vCPU for the general-purpose families (EC2 instance type pages).
_MEMORY_PER_VCPU = {
    "c5": 2,
    "c5n": 5.25,
    "c6i": 2,
    "m5": 4,
    "m6i": 4,
    "m7i": 4,
    "r5d": 8,
    "r6i": 8,
    "r7i": 8,
    "i3en": 8,
    "t3": 4,
}
_SIZE_VCPUS = {"medium": 2, "large": 2, "xlarge": 4}


# Grace CPUs (Arm) have one thread per core.
_ONE_THREAD_PER_CORE = ("ml.p6e-gb200.",)


def instance_spec(instance_type: str) -> InstanceSpec:
    """Hardware facts for a HyperPod instance type (``ml.`` prefix) or, without the prefix, an
    EC2 type of the general-purpose families above (the EKS `system` node group)."""
    if instance_type in _ACCELERATED:
        gpus, vcpus, mem, efa, chip = _ACCELERATED[instance_type]
        tpc = 1 if instance_type.startswith(_ONE_THREAD_PER_CORE) else 2
        return InstanceSpec(
            vcpus=vcpus,
            memory_gib=mem,
            gpus=gpus,
            efa_interfaces=efa,
            accelerator=chip,
            threads_per_core=tpc,
            gpu_memory_gib=GPU_MEMORY_GIB.get(chip, 0) if gpus else 0,
        )
    m = re.match(r"^(?:ml\.)?([a-z0-9]+)\.(\d*)(medium|large|xlarge)$", instance_type)
    if not m or m.group(1) not in _MEMORY_PER_VCPU:
        raise KeyError(f"no hardware facts for instance type {instance_type!r} in config/catalog.py")
    family, mult, size = m.groups()
    vcpus = _SIZE_VCPUS[size] * (int(mult) if mult else 1)
    if family == "t3" and size == "medium":
        return InstanceSpec(vcpus=2, memory_gib=4)
    return InstanceSpec(vcpus=vcpus, memory_gib=int(vcpus * _MEMORY_PER_VCPU[family]))


# Instance families whose EFA supports GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1): the P4 and
# later P-series GPU instances (EC2 EFA documentation, "Supported instance types").
_EFA_RDMA_FAMILIES = ("ml.p4d.", "ml.p4de.", "ml.p5.", "ml.p5e.", "ml.p5en.", "ml.p6-", "ml.p6e-")

# Ray's accelerator_type names (ray.util.accelerators) for the chips above; the rendered LLM config
# is checked against the installed Ray (manifests/inference.py serve_config_problems).
_RAY_ACCELERATOR = {
    "A100": "A100-40G",
    "A100-80GB": "A100-80G",
    "H100": "H100",
    "H200": "H200",
    "B200": "B200",
    "A10G": "A10G",
    "L4": "L4",
    "L40S": "L40S",
}


def efa_gpudirect_rdma(instance_type: str) -> bool:
    return instance_type.startswith(_EFA_RDMA_FAMILIES) and instance_type in _ACCELERATED


def ray_accelerator_type(instance_type: str) -> str | None:
    """Ray's name for the instance type's GPU (None: Ray has none for it, or no GPU)."""
    chip = _ACCELERATED.get(instance_type, (0, 0, 0, 0, ""))[4]
    return _RAY_ACCELERATOR.get(chip)


def is_trainium(instance_type: str) -> bool:
    return instance_type.startswith(("ml.trn1", "ml.trn2"))


@functools.cache
def gpu_instance_types() -> tuple[str, ...]:
    return tuple(t for t in hyperpod_instance_types() if t in _ACCELERATED and _ACCELERATED[t][0] > 0)


@functools.cache
def efa_instance_types() -> tuple[str, ...]:
    return tuple(t for t in hyperpod_instance_types() if t in _ACCELERATED and _ACCELERATED[t][3] > 0)


# ---------------------------------------------------------------------------------------------
# What a Kubernetes node of a type offers to pods (allocatable), as the EKS AMIs compute it
# ---------------------------------------------------------------------------------------------

# ENIs and IPv4 addresses per ENI of each EC2 type (the ml. types: their EC2 counterparts),
# copied from amazon-eks-ami's instance table (the file names its commit).
_ENI_FILE = Path(__file__).resolve().parent / "eni_limits.json"


@functools.cache
def _eni_limits() -> dict[str, tuple[int, int]]:
    data = json.loads(_ENI_FILE.read_text())
    return {t: (enis, ips) for t, (enis, ips) in data["instance_types"].items()}


# Memory the hypervisor and firmware keep from the nominal size: the kubelet's capacity is below
# the EC2 figure. Karpenter's default estimate (settings, VM_MEMORY_OVERHEAD_PERCENT = 0.075).
VM_MEMORY_OVERHEAD = 0.075
# The EKS AMIs' kubelet evictionHard memory.available (nodeadm defaultKubeletSubConfig).
EVICTION_HARD_MEMORY_MIB = 100


def max_pods(instance_type: str) -> int:
    """The EKS AMI's maxPods with the VPC CNI (no prefix delegation): ENIs x (IPv4 per ENI - 1)
    + 2 (amazon-eks-ami nodeadm, CalcMaxPods / calculateStandardMaxPods)."""
    ec2_type = instance_type.removeprefix("ml.")
    if ec2_type not in _eni_limits():
        raise KeyError(f"no ENI limits for instance type {instance_type!r} in config/eni_limits.json")
    enis, ips = _eni_limits()[ec2_type]
    return enis * (ips - 1) + 2


def max_pods_with_trunk(instance_type: str) -> int:
    """Pods a node can give an address to once the VPC CNI's security groups for pods
    (``ENABLE_POD_ENI``) attaches its trunk interface: the trunk takes one of the node's ENIs, so
    ordinary pods have one ENI fewer (the kubelet's maxPods is not lowered by it). Pods with their
    own security group use branch interfaces of the trunk instead (EKS user guide, security
    groups for pods)."""
    ec2_type = instance_type.removeprefix("ml.")
    if ec2_type not in _eni_limits():
        raise KeyError(f"no ENI limits for instance type {instance_type!r} in config/eni_limits.json")
    enis, ips = _eni_limits()[ec2_type]
    return min(max_pods(instance_type), (enis - 1) * (ips - 1) + 2)


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """kubeReserved CPU: 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4 and
    0.25 % of the rest (amazon-eks-ami nodeadm getCPUMillicoresToReserve; integer maths as there)."""
    total = vcpus * 1000
    bounds = (0, 1000, 2000, 4000, total)
    per_10k = (600, 100, 50, 25)
    return sum(
        (min(total, end) - start) * pct // 10000
        for start, end, pct in zip(bounds, bounds[1:], per_10k, strict=False)
        if total >= start and end >= start
    )


def kube_reserved_memory_mib(pods: int) -> int:
    """kubeReserved memory: 11 MiB per pod the node may run plus 255 MiB (amazon-eks-ami
    nodeadm getMemoryMebibytesToReserve)."""
    return 11 * pods + 255


@dataclass(frozen=True)
class Allocatable:
    """One node's capacity and allocatable (capacity - kubeReserved - evictionHard)."""

    cpu_millis: int
    memory_mib: int
    pods: int
    capacity_cpu_millis: int
    capacity_memory_mib: int


def node_allocatable(instance_type: str, *, threads_per_core: int | None = None) -> Allocatable:
    """What pods may request on one node of ``instance_type`` (``threads_per_core``: HyperPod's
    setting for the group; None: the type's default)."""
    spec = instance_spec(instance_type)
    vcpus = spec.vcpus if threads_per_core is None else spec.vcpus_at(threads_per_core)
    pods = max_pods(instance_type)
    memory = int(spec.memory_gib * 1024 * (1 - VM_MEMORY_OVERHEAD))
    return Allocatable(
        cpu_millis=vcpus * 1000 - kube_reserved_cpu_millis(vcpus),
        memory_mib=memory - kube_reserved_memory_mib(pods) - EVICTION_HARD_MEMORY_MIB,
        pods=pods,
        capacity_cpu_millis=vcpus * 1000,
        capacity_memory_mib=memory,
    )
