"""The `inference:` section: the Ray Serve app (owned by the inference workload).

Two services come from it: the app that serves what our training job produced
(`workloads/inference/`), and an optional Ray Serve LLM service (vLLM engine) for a model stored on
FSx or S3. Checks that need other sections (the HyperPod instance group, its GPUs) run in
``check_against``, one of EnvironmentConfig's cross-section checks (config/environment.py).

One module because it is one config section: its fields and their validators sit next to the values
they guard.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config import catalog
from config.base import Frozen
from config.hyperpod import HyperPod, InstanceGroup, default_gpu_group

# The node label (HyperPod instance-group label) that marks a group for serving.
SERVE_LABEL = ("workload", "ray-serve")
RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
APP_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")

# KubeRay v1.7.0 RayService upgrade strategies (spec.upgradeStrategy.type).
UpgradeStrategy = Literal["NewCluster", "NewClusterWithIncrementalUpgrade", "None"]


def _storage_location(v: str, what: str) -> str:
    """``v``, or a ValueError saying it is not ``what`` (a path on FSx or an S3 URI) and why."""
    if v.startswith("s3://"):
        if not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$", v):
            raise ValueError(f"{v!r} is not {what}: an S3 URI must look like s3://bucket/prefix")
    elif not re.match(r"^/[A-Za-z0-9_./-]{1,4095}$", v) or v == "/":
        raise ValueError(f"{v!r} is not {what}: expected an absolute path (FSx: /fsx/...) or an s3://bucket/prefix URI")
    return v


class Autoscaling(Frozen):
    """Ray Serve ``autoscaling_config`` of the generation deployment."""

    min_replicas: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Fewest replicas; 1 so the first request never waits for a GPU node and a model load.",
    )
    max_replicas: int = Field(
        default=2,
        ge=1,
        le=1024,
        description="Most replicas; 2 so one can be lost (node replacement) while the other serves.",
    )
    target_ongoing_requests: float | None = Field(
        default=None,
        gt=0,
        description="Ongoing requests per replica autoscaling aims for; below max_ongoing_requests. Null: max_batch_size.",
    )
    upscale_delay_s: float = Field(default=10.0, ge=0, description="Seconds of overload before scaling up.")
    downscale_delay_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds of low load before scaling down (a GPU replica is slow to bring back).",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"inference.autoscaling: min_replicas ({self.min_replicas}) must be <= "
                f"max_replicas ({self.max_replicas})"
            )
        return self


class Llm(Frozen):
    """A Ray Serve LLM (``ray.serve.llm``, vLLM engine) service for a model on FSx or S3."""

    enabled: bool = Field(default=False, description="Render and deploy the Ray Serve LLM service.")
    model_id: str = Field(
        default="served-llm",
        description='The name clients send as "model" on /v1/chat/completions and /v1/completions.',
    )
    model_source: str = Field(
        default="/fsx/models/served-llm",
        description="Hugging Face-format weights on FSx (/fsx/...) or in S3 (s3://...); nothing is downloaded from the internet.",
    )
    external_model: bool = Field(
        default=False,
        description=(
            "model_source is a model this environment does not train (a downloaded Hugging Face model). "
            "false: it must be the export of the environment's training run (training.export_path, on FSx, "
            "or its copy in the checkpoint bucket), checked at synth, so the service serves what the run trains."
        ),
    )
    instance_group: str | None = Field(
        default=None, description="HyperPod instance group of the engines; null: the generation service's group."
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=8, description="GPUs per engine; a 7-8B model in bf16 fits one 48 GB L40S."
    )
    max_model_len: int = Field(
        default=8192, ge=128, le=1_048_576, description="Context length the engine reserves KV cache for."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0.1, le=0.98, description="vLLM's share of GPU memory (weights and KV cache)."
    )
    min_replicas: int = Field(default=1, ge=0, description="Fewest engine replicas.")
    max_replicas: int = Field(
        default=2, ge=1, description="Most engine replicas; they must fit the group with the generation service."
    )
    max_ongoing_requests: int = Field(
        default=64, ge=1, le=100_000, description="Concurrent requests per replica (vLLM batches continuously)."
    )

    @field_validator("model_source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _storage_location(v, "a model location")

    @field_validator("model_id")
    @classmethod
    def _model_id(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$", v):
            raise ValueError(f"{v!r} is not a model ID; allowed: 1-128 alphanumerics, '_', '.', '/', '-'")
        return v

    @model_validator(mode="after")
    def _bounds(self) -> Llm:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"inference.llm: min_replicas ({self.min_replicas}) must be <= max_replicas ({self.max_replicas})"
            )
        return self


# ElastiCache node families that support encryption in transit and at rest with a customer key
# for Valkey (ElastiCache user guide, "Supported node types").
GCS_STORE_NODE_FAMILIES = ("t4g", "t3", "m7g", "m6g", "m5", "r7g", "r6g", "r5")
_GCS_NODE_RE = re.compile(r"^cache\.([a-z0-9]+)\.(micro|small|medium|large|[0-9]*xlarge)$")


class GcsFaultTolerance(Frozen):
    """GCS fault tolerance of every RayService: the head's cluster metadata in ElastiCache for
    Valkey (TLS, AUTH token from Secrets Manager), so a lost head pod does not take the service down."""

    enabled: bool | None = Field(
        default=None,
        description="GCS fault tolerance with an external ElastiCache for Valkey store on every RayService. Null: on wherever the Secrets Store CSI driver delivers secrets to pods (today: eks.ray_token_auth), since it carries the store's AUTH token to the head.",
    )
    node_type: str = Field(
        default="cache.t4g.small",
        description="ElastiCache node type (cache.<family>.<size>); the GCS holds metadata only (actors, nodes, Serve's checkpoints), a few MB.",
    )
    replicas: int = Field(
        default=1,
        ge=0,
        le=5,
        description="Read replicas of the primary in other AZs; at least 1 turns on automatic failover and Multi-AZ (required in production).",
    )
    snapshot_retention_days: int = Field(
        default=1,
        ge=0,
        le=35,
        description="Days ElastiCache keeps daily snapshots (0: none; production needs at least 1).",
    )

    @field_validator("node_type")
    @classmethod
    def _node_type(cls, v: str) -> str:
        m = _GCS_NODE_RE.match(v)
        if not m or m.group(1) not in GCS_STORE_NODE_FAMILIES:
            raise ValueError(
                f"{v!r} is not an ElastiCache node type for the GCS store; allowed: cache.<family>.<size> "
                f"with family one of {', '.join(GCS_STORE_NODE_FAMILIES)}"
            )
        return v

    def errors(self, *, production: bool, secrets_delivered: bool) -> list[str]:
        """Rules against the rest of the environment, one line each."""
        out = []
        if self.enabled and not secrets_delivered:
            out.append(
                "inference.gcs_fault_tolerance.enabled: true needs the Secrets Store CSI driver on the "
                "cluster to deliver the store's AUTH token to the head (eks.ray_token_auth: true); "
                "set eks.ray_token_auth: true, or enabled: null or false"
            )
        if production and self.replicas < 1:
            out.append(
                f"inference.gcs_fault_tolerance.replicas: {self.replicas} in a production environment; "
                "allowed: 1-5 (automatic failover needs a replica)"
            )
        if production and self.snapshot_retention_days < 1:
            out.append(
                f"inference.gcs_fault_tolerance.snapshot_retention_days: {self.snapshot_retention_days} in a "
                "production environment; allowed: 1-35"
            )
        return out


class Inference(Frozen):
    """The generation service that serves the training run's newest valid checkpoint."""

    app_name: str = Field(
        default="generate",
        description="Serve application name (1-32 lowercase alphanumerics and '-'); the RayService is <name_prefix>-<app_name>.",
    )
    instance_group: str | None = Field(
        default=None,
        description="HyperPod instance group of the replicas; null: the GPU group labelled workload: ray-serve, else the first GPU group.",
    )
    # Whole GPUs keep replicas from sharing (and fighting over) one device.
    gpus_per_replica: float = Field(
        default=1.0,
        ge=0,
        le=8,
        description="GPUs per replica; a fraction below 1 packs replicas on one GPU, above 1 must be whole.",
    )
    cpus_per_replica: float = Field(
        default=2.0, gt=0, le=192, description="CPUs per replica: HTTP handling, tokenisation, the batching loop."
    )
    run_name: str | None = Field(
        default=None, description="Training run whose newest intact checkpoint is served; null: training.run_name."
    )
    storage_path: str | None = Field(
        default=None,
        description="Where that run's checkpoints are (/fsx/... or s3://); null: the training job's storage.",
    )
    max_batch_size: int = Field(
        default=16, ge=1, le=1024, description="Largest batch @serve.batch forms (one forward pass)."
    )
    batch_wait_timeout_s: float = Field(
        default=0.005, ge=0, le=10, description="Seconds @serve.batch waits to fill a batch."
    )
    max_ongoing_requests: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="Requests a replica accepts at once (at least max_batch_size); two full batches: one running, one forming.",
    )
    max_queued_requests: int = Field(
        default=512, ge=-1, description="Requests queued before clients get 503 (back-pressure); -1: unbounded."
    )
    # Ray Serve's high-throughput mode (Ray >= 2.55; Ray's KubeRay guide "Enable High Throughput
    # on Ray Serve with KubeRay"): HAProxy is each pod's ingress on the serve port instead of the
    # Python proxy actor, replicas take HTTP directly (no actor call per request and no body
    # callback to the proxy), and Ray's throughput preset. On for every Ray process of the
    # service (manifests/serve_config.py ray_env). Measured on one CPU replica at
    # concurrency 32: 111 -> 286-364 req/s against Ray's defaults (docs/benchmarks.md).
    high_throughput: bool = Field(
        default=True,
        description="Ray Serve's high-throughput mode: HAProxy ingress and Ray's throughput preset on every Ray process of the service.",
    )
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, description="Replica autoscaling.")
    serve_export: bool = Field(
        default=False,
        description=(
            "The generation service serves the training run's Hugging Face export (training.export_path, "
            "what `hpray export` writes; a byte-token run's) instead of its newest checkpoint: the same "
            "folder the LLM service serves."
        ),
    )
    gpu_dtype: Literal["bfloat16", "float32"] = Field(
        default="bfloat16",
        description="Dtype of the served weights and key/value cache on a GPU replica (a CPU replica serves float32): bfloat16 halves the memory and doubles the tensor-core rate.",
    )
    max_tokens_limit: int = Field(
        default=256, ge=1, le=100_000, description="Largest max_tokens a request may ask for; more is a 400."
    )
    default_max_tokens: int = Field(
        default=16, ge=1, description="max_tokens of a request that sets none; at most max_tokens_limit."
    )
    health_check_period_s: float = Field(
        default=10.0, gt=0, description="Seconds between Serve health checks (a 1-token generation)."
    )
    health_check_timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds before a health check counts as failed."
    )
    graceful_shutdown_wait_loop_s: float = Field(
        default=2.0, ge=0, description="Seconds between a draining replica's checks for in-flight requests."
    )
    graceful_shutdown_timeout_s: float = Field(default=30.0, ge=0, description="Longest a replica drains on shutdown.")
    image: str | None = Field(
        default=None,
        description="Container image of the service; null: training.image, else the workloads image `cdk deploy` builds from workloads/Dockerfile.",
    )
    # A new Ray cluster per upgrade needs twice the GPUs (ray-project/kuberay#1476).
    upgrade_strategy: UpgradeStrategy = Field(
        default="NewCluster",
        description="KubeRay RayService upgrade: NewCluster (zero downtime, twice the GPUs during an upgrade), NewClusterWithIncrementalUpgrade or None.",
    )
    llm: Llm = Field(default_factory=Llm, description="The optional Ray Serve LLM (vLLM) service.")
    gcs_fault_tolerance: GcsFaultTolerance = Field(
        default_factory=GcsFaultTolerance,
        description="GCS fault tolerance of every RayService (ElastiCache for Valkey).",
    )

    @field_validator("app_name")
    @classmethod
    def _app(cls, v: str) -> str:
        if not APP_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not an app name; allowed: 1-32 lowercase alphanumerics and '-', "
                "starting and ending with an alphanumeric"
            )
        return v

    @field_validator("run_name")
    @classmethod
    def _run(cls, v: str | None) -> str | None:
        if v is not None and not RUN_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a run name; allowed: 1-128 alphanumerics, '_', '.', '-', starting with an alphanumeric"
            )
        return v

    @field_validator("storage_path")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        return v if v is None else _storage_location(v, "a checkpoint storage location")

    @model_validator(mode="after")
    def _within(self) -> Inference:
        errors = []
        if self.max_ongoing_requests < self.max_batch_size:
            errors.append(
                f"inference.max_ongoing_requests ({self.max_ongoing_requests}) must be >= "
                f"inference.max_batch_size ({self.max_batch_size}): a replica never holds more "
                "requests than max_ongoing_requests, so larger batches could never form"
            )
        if self.target_ongoing_requests >= self.max_ongoing_requests:
            errors.append(
                f"inference.autoscaling.target_ongoing_requests ({self.target_ongoing_requests:g}) "
                f"must be below inference.max_ongoing_requests ({self.max_ongoing_requests}): a "
                "replica never holds more, so autoscaling would never see it overloaded"
            )
        if self.default_max_tokens > self.max_tokens_limit:
            errors.append(
                f"inference.default_max_tokens ({self.default_max_tokens}) must be <= "
                f"inference.max_tokens_limit ({self.max_tokens_limit})"
            )
        if self.gpus_per_replica > 1 and self.gpus_per_replica != int(self.gpus_per_replica):
            errors.append(
                f"inference.gpus_per_replica ({self.gpus_per_replica}) above 1 must be a whole number of GPUs"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    @property
    def target_ongoing_requests(self) -> float:
        return self.autoscaling.target_ongoing_requests or float(self.max_batch_size)

    # Cross-section checks -------------------------------------------------------------------

    def resolved_instance_group(self, hyperpod: HyperPod) -> InstanceGroup:
        """The HyperPod instance group the generation replicas run on."""
        if self.instance_group is not None:
            return hyperpod.group(self.instance_group)
        # Default: the GPU group labelled for serving (workload: ray-serve), else the first GPU group.
        group = default_gpu_group(hyperpod.instance_groups, label=SERVE_LABEL)
        if group is not None:
            return group
        raise KeyError("no GPU instance group in hyperpod.instance_groups; set inference.instance_group")

    def gcs_fault_tolerance_on(self, *, secrets_delivered: bool) -> bool:
        """Whether the RayServices get GCS fault tolerance (and the platform its Valkey store)."""
        ft = self.gcs_fault_tolerance.enabled
        return secrets_delivered if ft is None else ft

    def resolved_llm_group(self, hyperpod: HyperPod) -> InstanceGroup:
        if self.llm.instance_group is not None:
            return hyperpod.group(self.llm.instance_group)
        return self.resolved_instance_group(hyperpod)

    def pod_shape(self) -> tuple[int, int, float]:
        """(replicas per worker pod, GPUs per pod, CPUs per pod): a pod holds whole GPUs."""
        if self.gpus_per_replica <= 0:
            return 1, 0, self.cpus_per_replica + 1
        if self.gpus_per_replica < 1:
            per_pod = int(1 // self.gpus_per_replica)
            return per_pod, 1, per_pod * self.cpus_per_replica + 1
        # +1 CPU: the Ray worker process itself (raylet, object store) next to the replicas.
        return 1, int(self.gpus_per_replica), self.cpus_per_replica + 1

    def worker_pods(self) -> tuple[int, int]:
        """(min, max) worker pods of the RayService from the replica bounds."""
        per_pod = self.pod_shape()[0]
        lo = math.ceil(self.autoscaling.min_replicas / per_pod)
        hi = math.ceil(self.autoscaling.max_replicas / per_pod)
        return lo, hi

    def check_against(self, hyperpod: HyperPod) -> list[str]:
        """Errors that need the HyperPod groups: one line each, naming the field."""
        errors: list[str] = []
        names = [g.name for g in hyperpod.instance_groups]
        for field, name in (
            ("inference.instance_group", self.instance_group),
            ("inference.llm.instance_group", self.llm.instance_group),
        ):
            if name is not None and name not in names:
                errors.append(f"{field}: no HyperPod instance group named {name!r}; known: {', '.join(names)}")
        if errors:
            return errors
        try:
            group = self.resolved_instance_group(hyperpod)
        except KeyError:
            # No GPU group and none named: nothing to place here (a CPU-only cluster is valid);
            # rendering the RayService then fails with a clear message instead.
            return errors
        spec = catalog.instance_spec(group.instance_type)
        _, pod_gpus, pod_cpus = self.pod_shape()
        # GPUs each service holds on each group at most, twice over during a NewCluster upgrade.
        demand: dict[str, int] = {}
        if self.gpus_per_replica > spec.gpus:
            errors.append(
                f"inference.gpus_per_replica: {self.gpus_per_replica:g} GPUs per replica but "
                f"{group.instance_type} (group {group.name!r}) has {spec.gpus}"
            )
        elif pod_cpus > spec.vcpus * max(pod_gpus, 1) / max(spec.gpus, 1):
            errors.append(
                f"inference.cpus_per_replica: {self.cpus_per_replica:g} CPUs per replica (+1 for "
                f"Ray) exceed the {spec.vcpus // max(spec.gpus, 1)} vCPUs per GPU of "
                f"{group.instance_type}"
            )
        else:
            _, hi = self.worker_pods()
            factor = 2 if self.upgrade_strategy == "NewCluster" else 1
            demand[group.name] = factor * hi * pod_gpus
            total = group.instance_count * spec.gpus
            if hi * pod_gpus > total:
                errors.append(
                    f"inference.autoscaling.max_replicas: {self.autoscaling.max_replicas} replicas "
                    f"need {hi * pod_gpus} GPUs but group {group.name!r} has {total} "
                    f"({group.instance_count} x {spec.gpus})"
                )
            elif factor * hi * pod_gpus > total:
                errors.append(
                    f"inference.upgrade_strategy: 'NewCluster' starts a second Ray cluster beside "
                    f"the running one, so {self.autoscaling.max_replicas} replicas need "
                    f"{2 * hi * pod_gpus} GPUs during an upgrade but group {group.name!r} has "
                    f"{total} (ray-project/kuberay#1476); lower inference.autoscaling.max_replicas, "
                    "add nodes, or choose 'None' (in-place Serve updates only) or "
                    "'NewClusterWithIncrementalUpgrade'"
                )
        if self.llm.enabled:
            lgroup = self.resolved_llm_group(hyperpod)
            lspec = catalog.instance_spec(lgroup.instance_type)
            ltotal = lgroup.instance_count * lspec.gpus
            need = self.llm.max_replicas * self.llm.tensor_parallel_size
            factor = 2 if self.upgrade_strategy == "NewCluster" else 1
            if lspec.gpus == 0:
                errors.append(
                    f"inference.llm.instance_group: group {lgroup.name!r} ({lgroup.instance_type}) "
                    "has no NVIDIA GPUs; the vLLM engine needs a GPU group"
                )
            elif self.llm.tensor_parallel_size > lspec.gpus:
                errors.append(
                    f"inference.llm.tensor_parallel_size: {self.llm.tensor_parallel_size} GPUs "
                    f"per engine but {lgroup.instance_type} has {lspec.gpus}"
                )
            elif factor * need + demand.get(lgroup.name, 0) > ltotal:
                errors.append(
                    f"inference.llm.max_replicas: {self.llm.max_replicas} engines of "
                    f"{self.llm.tensor_parallel_size} GPU(s) (x{factor} during a "
                    f"{self.upgrade_strategy} upgrade) plus {demand.get(lgroup.name, 0)} GPUs of "
                    f"the generation service exceed group {lgroup.name!r} "
                    f"({lgroup.instance_count} x {lspec.gpus} GPUs)"
                )
        return errors
