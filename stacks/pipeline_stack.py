"""The delivery pipeline stack: one Stage class builds every environment, deployed in the order
``config/pipeline.yaml`` gives; production stages wait for a permissions-broadening check and a
manual approval."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Environment, Stack, Stage
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from config import versions
from config.environment import EnvironmentConfig
from constructs.delivery_pipeline import DeliveryPipeline
from stacks.pipeline_config import PipelineConfig
from stacks.platform import PlatformStacks, build_platform

# What the synth step runs on a fresh checkout: the pipeline synth with every gate (cdk-nag
# inside synth; cfn-lint, checkov, the document checks and the review report over the templates
# of every Stage). `make pipeline` installs only what synth needs (requirements-synth.lock, checkov,
# npm ci): no torch, no Ray. The test suite runs in the repository's CI (.ci/run, `make test`) on
# every commit, before the pipeline sees it; repeating it here would need a larger host for 13
# minutes of tests that the pipeline cannot fix.
SYNTH_COMMANDS = ("make pipeline",)
# Debian tools the gates need, installed before `make pipeline`: graphviz (the review's diagram)
# from the image's Ubuntu, promtool and amtool from their upstream releases (config/versions.py).
# The apt stamp then stops the Makefile from installing the test suite's Debian packages.
SYNTH_INSTALL_COMMANDS = (
    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz",
    *versions.release_install_commands(versions.PROMETHEUS_RELEASE),
    *versions.release_install_commands(versions.ALERTMANAGER_RELEASE),
    "promtool --version && amtool --version && dot -V",
    "mkdir -p .stamps && touch .stamps/apt",
)
# Sized from `make pipeline` measured on a fresh checkout (docs/benchmarks.md, "Pipeline synth"):
# peak memory of the whole process tree under 1 GiB and about a minute and a half of wall time
# with the installs. BUILD_GENERAL1_SMALL (2 vCPUs, 3 GB) leaves three times that memory; the
# timeout leaves ten times the time for a slower host and slower downloads.
SYNTH_COMPUTE_TYPE = codebuild.ComputeType.SMALL
SYNTH_TIMEOUT = Duration.minutes(20)
# The asset stage builds the workloads image (workloads/Dockerfile) and pushes it into every
# environment's account. No Docker daemon runs where this project is tested, so the size is an
# estimate from the build's parts, stated in docs/deploy.md ("The pipeline's asset stage"): the
# CUDA Ray base (about 6 GB compressed, 15 GB unpacked) pulled once for two stages, aws-ofi-nccl
# compiled with make -j(nproc), the EFA installer run twice, torch's CUDA wheels and their NVIDIA
# libraries installed (about 4 GB downloaded, 8 GB unpacked, committed as one layer that the
# builder compresses on every core), then the image (about 10 GB compressed) pushed three times.
# CodeBuild's default host (BUILD_GENERAL1_SMALL: 2 vCPUs, 3 GB, 64 GB of disk) holds the base,
# the pip layer, its compressed copy and the build cache with little room, and spends most of an
# hour in compression and the compile; its default limit is 60 minutes. LARGE (8 vCPUs, 15 GB,
# 128 GB of disk) parallelises the compile and the compression and doubles the disk; 120 minutes
# leave twice the estimated worst case (about 55 minutes with a cold cache) for a slow registry.
ASSET_COMPUTE_TYPE = codebuild.ComputeType.LARGE
ASSET_TIMEOUT = Duration.minutes(120)


def stage_id(env: EnvironmentConfig) -> str:
    return "".join(part.capitalize() for part in env.name.split("-"))


class PlatformStage(Stage):
    """Every stack of one environment; the same class for every environment."""

    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, env=Environment(account=config.account, region=config.region), **kwargs)
        self.config = config
        self.platform: PlatformStacks = build_platform(self, config)


class PipelineStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_config: PipelineConfig,
        environments: list[EnvironmentConfig],
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=pipeline_config.account, region=pipeline_config.region),
            description="HyperPod Ray platform: delivery pipeline",
            **kwargs,
        )
        src = pipeline_config.source
        self.delivery = DeliveryPipeline(
            self,
            "Delivery",
            pipeline_name=pipeline_config.pipeline_name,
            repository=src.repository,
            branch=src.branch,
            connection_arn=src.connection_arn,
            synth_commands=SYNTH_COMMANDS,
            synth_install_commands=SYNTH_INSTALL_COMMANDS,
            synth_compute_type=SYNTH_COMPUTE_TYPE,
            synth_timeout=SYNTH_TIMEOUT,
            asset_compute_type=ASSET_COMPUTE_TYPE,
            asset_timeout=ASSET_TIMEOUT,
            # Cross-account KMS keys on the artifact bucket whenever a stage deploys into another
            # account than the pipeline's (otherwise the stage accounts cannot read artifacts).
            cross_account_keys=any(e.account != pipeline_config.account for e in environments),
            docker_hub_credential=secretsmanager.Secret.from_secret_complete_arn(
                self, "DockerHubCredential", pipeline_config.docker_hub_credential_secret_arn
            ),
        )
        self.stages: list[PlatformStage] = []
        for env in environments:
            stage = PlatformStage(self, stage_id(env), config=env)
            self.delivery.add_environment(
                stage,
                production=env.production,
                description=f"{env.name} ({env.account}/{env.region})",
                environment=env.name,
            )
            self.stages.append(stage)
        self.delivery.build()


def build_pipeline(
    scope: Construct, pipeline_config: PipelineConfig, environments: list[EnvironmentConfig]
) -> PipelineStack:
    return PipelineStack(scope, "PlatformPipeline", pipeline_config=pipeline_config, environments=environments)
