"""The delivery pipeline stack: one Stage class builds every environment, deployed in the order
``config/pipeline.yaml`` gives; production stages wait for a permissions-broadening check and a
manual approval."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, Stack, Stage
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from config.model import EnvironmentConfig
from config.pipeline import PipelineConfig
from constructs.delivery_pipeline import DeliveryPipeline
from stacks.platform import PlatformStacks, build_platform

# What the synth step runs on a fresh checkout: the README's test command (which installs the
# pinned dependencies: venv from requirements.lock, npm ci, Debian packages), then the pipeline
# synth with every gate (cdk-nag inside synth; cfn-lint, checkov and the review report over the
# templates of every Stage).
SYNTH_COMMANDS = ("make test", "make pipeline")


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
                stage, production=env.production, description=f"{env.name} ({env.account}/{env.region})"
            )
            self.stages.append(stage)
        self.delivery.build()


def build_pipeline(
    scope: Construct, pipeline_config: PipelineConfig, environments: list[EnvironmentConfig]
) -> PipelineStack:
    return PipelineStack(scope, "PlatformPipeline", pipeline_config=pipeline_config, environments=environments)
