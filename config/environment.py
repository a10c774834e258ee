"""The whole environment: every section, and the rules that tie sections together.

Each section validates its own values where they are defined. Rules that need more than one
section run here, at load time, through one pattern: ``CROSS_CHECKS``, functions of the whole
environment that return one line per problem, so that independent mistakes are reported together.
The sizing checks (the training job against its group, every pod on its node pool:
sizing/placement.py) run over the environment's plan once the config has loaded (manifests/check.py).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field, field_validator, model_validator

from config import catalog, versions
from config.base import Frozen
from config.batch_inference import BatchInference
from config.eks import Eks
from config.fields import PREFIX_RE, AccountId, RegionName
from config.hyperpod import HyperPod
from config.inference import Inference
from config.jobs import Jobs
from config.network import PULL_THROUGH_SECRET_ARN_RE, Network
from config.observability import Observability
from config.pretokenize import Pretokenize
from config.storage import Fsx, Storage
from config.tags import REQUIRED_TAGS, Tags
from config.teams import Team, team_errors, team_prefix_errors
from config.training import Training


class EnvironmentConfig(Frozen):
    """One environment: where it deploys and every section of the platform and its workloads."""

    name: str = Field(description="Environment name; the loader sets it from the file name (dev.yaml: dev).")
    account: AccountId = Field(description="AWS account ID, 12 digits (quote it in YAML).")
    region: RegionName = Field(
        description="AWS region, e.g. us-east-1; AWS must publish the HyperPod health agent image there."
    )
    name_prefix: str = Field(
        description="Prefix of every resource name: 3-24 lowercase letters, digits and hyphens. Changing it replaces the stateful resources."
    )
    production: bool = Field(
        default=False,
        description="RETAIN on stateful resources, termination protection, a NAT gateway per AZ, required cost tags, manual approval in the pipeline.",
    )
    tags: Tags = Field(description="Cost-allocation tags on every resource.")
    network: Network = Field(description="The VPC.")
    eks: Eks = Field(default_factory=Eks, description="The EKS cluster.")
    hyperpod: HyperPod = Field(description="The HyperPod cluster.")
    fsx: Fsx = Field(default_factory=Fsx, description="FSx for Lustre.")
    storage: Storage = Field(default_factory=Storage, description="The checkpoint bucket's lifecycle.")
    training: Training = Field(default_factory=Training, description="The Ray Train job.")
    inference: Inference = Field(default_factory=Inference, description="The Ray Serve services.")
    pretokenize: Pretokenize | None = Field(
        default=None,
        description=(
            "The pre-tokenization RayJob: raw documents (S3 or FSx) to the token dataset on FSx that "
            "training.dataset_path reads; null: not deployed."
        ),
    )
    batch_inference: BatchInference | None = Field(
        default=None,
        description="A RayJob generating over a batch of prompts with vLLM (ray.data.llm); null: not deployed.",
    )
    jobs: Jobs = Field(
        default_factory=Jobs, description="Users' own jobs (`hpray submit job`): the S3 locations they may read."
    )
    observability: Observability = Field(
        default_factory=Observability,
        description="Metrics (Amazon Managed Prometheus), container logs (CloudWatch Logs) and alarms.",
    )
    teams: list[Team] = Field(
        default_factory=list,
        description="Teams with namespace-scoped access (EKS access entries), each with its namespace and resource quota.",
    )

    @field_validator("name_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not PREFIX_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid name prefix; allowed: 3-24 lowercase letters, digits and "
                "hyphens, starting with a letter"
            )
        return v

    @model_validator(mode="after")
    def _cross(self) -> EnvironmentConfig:
        errors: list[str] = []
        for check in CROSS_CHECKS:
            errors.extend(check(self))
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def s3_copy_of(self, path: str) -> str | None:
        """The checkpoint bucket's copy of FSx ``path`` where it lies under the file system path
        the data repository association links (it exports what is written there); None elsewhere."""
        root = f"/fsx{self.fsx.file_system_path.rstrip('/')}/"
        if not path.startswith(root):
            return None
        return f"s3://{self.bucket_names()['checkpoints']}/{self.fsx.import_export_prefix}{path[len(root) :]}"

    def training_export_locations(self) -> list[str]:
        """Where the training run's export is (``hpray export``): ``training.export_path`` and,
        where it is under the file system path the data repository association links, its copy in
        the checkpoint bucket."""
        path = self.training.resolved_export_path(self.fsx.file_system_path).rstrip("/")
        copy = self.s3_copy_of(path)
        return [path] + ([copy] if copy else [])

    def batch_model_source(self) -> str | None:
        """What batch inference generates with: its model_source, else the training run's export."""
        b = self.batch_inference
        if b is None:
            return None
        return b.model_source or self.training_export_locations()[0]

    def _llm_source_errors(self) -> list[str]:
        """The LLM service serves the training run's export (the chain from training to serving),
        unless it declares an external model."""
        llm = self.inference.llm
        if not llm.enabled or llm.external_model:
            return []
        allowed = self.training_export_locations()
        if llm.model_source.rstrip("/") in allowed:
            return []
        return [
            f"inference.llm.model_source: {llm.model_source!r} is not the export of training run "
            f"{self.training.run_name!r} (training.export_path); allowed: {' or '.join(repr(a) for a in allowed)}, "
            "or inference.llm.external_model: true for a model this environment does not train"
        ]

    def _environment_errors(self) -> list[str]:
        """Rules that tie the top-level values (tags, names, region) to the sections."""
        errors: list[str] = []
        if self.production:
            missing = [t for t in REQUIRED_TAGS if not self.tags.as_dict().get(t)]
            if missing:
                errors.append(f"tags: production environments require {', '.join(missing)}")
        for name in self.bucket_names().values():
            if len(name) > 63:
                errors.append(
                    f"name_prefix: generated bucket name {name!r} is {len(name)} characters; "
                    "S3 allows at most 63 (shorten name_prefix)"
                )
        for z in self.network.availability_zones:
            if not z.name.startswith(self.region):
                errors.append(f"network.availability_zones: {z.name!r} is not an AZ of region {self.region}")
        errors.extend(self._docker_hub_credential_errors())
        hp_az_ids = {s.az_id for s in self.network.hyperpod_subnets}
        for i, g in enumerate(self.hyperpod.instance_groups):
            if g.subnet_az_id is not None and g.subnet_az_id not in hp_az_ids:
                errors.append(
                    f"hyperpod.instance_groups[{i}].subnet_az_id: {g.subnet_az_id!r} has no HyperPod "
                    f"subnet; configured AZ IDs: {', '.join(sorted(hp_az_ids))}"
                )
        return errors

    def _docker_hub_credential_errors(self) -> list[str]:
        """network.docker_hub_credential_secret_arn: present where a Docker Hub image is pulled
        through ECR (the LLM service), and in this environment's account and region."""
        arn = self.network.docker_hub_credential_secret_arn
        field = "network.docker_hub_credential_secret_arn"
        if arn is None:
            if self.network.images_from_ecr and self.inference.llm.enabled:
                return [
                    f"{field}: required with network.images_from_ecr and inference.llm.enabled: the Serve "
                    "LLM image (rayproject/ray-llm) comes through ECR's Docker Hub pull-through cache, which "
                    "signs in with a secret named ecr-pullthroughcache/... holding "
                    '{"username": ..., "accessToken": ...}; create it (docs/security.md) and put its ARN here'
                ]
            return []
        m = PULL_THROUGH_SECRET_ARN_RE.match(arn)
        assert m is not None  # the field's own validator
        if (m["account"], m["region"]) != (self.account, self.region):
            return [
                f"{field}: {arn!r} is in account {m['account']}, region {m['region']}; ECR's pull-through "
                f"cache reads only a secret of its own account and region ({self.account}, {self.region})"
            ]
        if not self.network.images_from_ecr:
            return [f"{field}: set, but network.images_from_ecr is false: nothing pulls through ECR; remove it"]
        return []

    def _eks_errors(self) -> list[str]:
        """Rules that tie the EKS section to the rest of the environment."""
        errors: list[str] = []
        if self.production:
            for cidr in self.eks.public_access_cidrs:
                if cidr.endswith("/0"):
                    errors.append(
                        f"eks.public_access_cidrs: {cidr} opens the production EKS endpoint to the "
                        "whole internet; list the operators' CIDR blocks instead"
                    )
        version = self.eks.kubernetes_version
        if self.production and versions.in_extended_support(version) and not self.eks.extended_support_acknowledged:
            from config.prices import extended_support_cost_text

            _, end_standard, end_extended = versions.EKS_CALENDAR[version]
            standard = [v for v in versions.supported_kubernetes_versions() if not versions.in_extended_support(v)]
            errors.append(
                f"eks.extended_support_acknowledged: Kubernetes {version} left EKS standard support on "
                f"{end_standard.isoformat()} and is in extended support until {end_extended.isoformat()}, "
                f"at {extended_support_cost_text()}; a production environment must acknowledge that "
                f"(eks.extended_support_acknowledged: true) or use a version in standard support "
                f"({', '.join(standard) or 'none that HyperPod supports yet'})"
            )
        if self.region not in versions.HEALTH_MONITORING_AGENT_REGISTRIES:
            errors.append(
                f"region: AWS publishes the HyperPod health monitoring agent image in "
                f"{', '.join(sorted(versions.HEALTH_MONITORING_AGENT_REGISTRIES))}, not in {self.region}"
            )
        return errors

    # Derived EKS values ---------------------------------------------------------------------

    def gpu_device_plugin_instance_types(self) -> list[str]:
        """Instance types the NVIDIA device plugin and the health monitoring agent run on: the
        explicit list from config, else the GPU types of this environment's HyperPod groups."""
        if self.eks.gpu_device_plugin_instance_types:
            return sorted(self.eks.gpu_device_plugin_instance_types)
        return sorted({g.instance_type for g in self.hyperpod.instance_groups if g.is_gpu})

    def efa_device_plugin_instance_types(self) -> list[str]:
        """Instance types with EFA among this environment's HyperPod groups (and the GPU list)."""
        efa = set(catalog.efa_instance_types())
        types = {g.instance_type for g in self.hyperpod.instance_groups} | set(self.gpu_device_plugin_instance_types())
        return sorted(t for t in types if t in efa)

    # Derived names --------------------------------------------------------------------------

    def bucket_names(self) -> dict[str, str]:
        suffix = f"{self.account}-{self.region}"
        return {
            "checkpoints": f"{self.name_prefix}-checkpoints-{suffix}",
            "access_logs": f"{self.name_prefix}-access-logs-{suffix}",
            # 'sagemaker-' prefix: AWS's managed HyperPod instance policy can read such buckets.
            "lifecycle_scripts": f"sagemaker-{self.name_prefix}-lifecycle-{suffix}",
        }

    @property
    def gcs_fault_tolerance(self) -> bool:
        """Every RayService has GCS fault tolerance with the platform's Valkey store."""
        return self.inference.gcs_fault_tolerance_on(secrets_delivered=self.eks.ray_token_auth)

    @property
    def hyperpod_cluster_name(self) -> str:
        return f"{self.name_prefix}-hyperpod"

    @property
    def eks_cluster_name(self) -> str:
        return f"{self.name_prefix}-eks"


# Rules across sections, in the order their messages are reported. Training and inference own
# their rules (group_problems in config/training.py, check_against in config/inference.py); how
# many workers fit, FSDP sharding and GPU memory run over the plan (sizing/), so a model that does
# not fit its GPUs fails `cdk synth`.
CROSS_CHECKS: tuple[Callable[[EnvironmentConfig], list[str]], ...] = (
    EnvironmentConfig._environment_errors,
    EnvironmentConfig._eks_errors,
    # A cluster with no GPU group and no group named has no training job (rendering it says so).
    lambda env: (
        []
        if env.training.instance_group is None and env.training.group(env.hyperpod.instance_groups) is None
        else env.training.group_problems(env.hyperpod.instance_groups)
    ),
    lambda env: env.inference.check_against(env.hyperpod),
    lambda env: env.inference.gcs_fault_tolerance.errors(
        production=env.production, secrets_delivered=env.eks.ray_token_auth
    ),
    lambda env: env._llm_source_errors(),
    lambda env: team_errors(env.teams, env.eks.admin_principal_arns),
    lambda env: env.observability.subscriber_errors(production=env.production),
    lambda env: team_prefix_errors(
        env.teams,
        env.bucket_names()["checkpoints"],
        {
            "fsx.import_export_prefix": env.fsx.import_export_prefix,
            "training.storage_path": env.training.storage_path,
            "training.data_path": env.training.data_path,
            "inference.storage_path": env.inference.storage_path,
            "inference.llm.model_source": env.inference.llm.model_source if env.inference.llm.enabled else None,
        },
    ),
)
