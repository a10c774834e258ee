"""The pipeline's config (``config/pipeline.yaml``): pipeline account, source connection and the
ordered list of environments it deploys.

Deploy-time only (app.py ``-c pipeline=true``, stacks/pipeline_stack.py, the CLI's bootstrap
check): nothing on the cluster reads it, so it lives with the stacks, not in config/ (the bottom
layer the workloads image ships whole). The YAML file stays beside the environments' files.
Each stage's environment is loaded with the checks over its plan (manifests/check.py), as
``cdk synth -c env=NAME`` loads it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from config.base import Frozen
from config.environment import EnvironmentConfig
from config.errors import ConfigError
from config.fields import AccountId, RegionName
from config.loader import (
    CONFIG_DIR,
    Place,
    format_validation_error,
    known_environments,
    places_of,
    with_place,
)
from config.yaml_source import read_text, read_yaml
from manifests.check import load_checked

PIPELINE_FILE = "pipeline.yaml"
CONNECTION_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z]{2}(-gov)?-[a-z]+-[0-9]:[0-9]{12}:connection/[0-9a-f-]{36}$"
)
REPOSITORY_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# A complete Secrets Manager secret ARN (with the 6-character suffix Secrets Manager appends).
SECRET_ARN_RE = re.compile(
    r"^arn:aws(-cn|-us-gov)?:secretsmanager:(?P<region>[a-z]{2}(-[a-z]+)+-\d):(?P<account>\d{12}):secret:"
    r"[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$"
)


class Source(Frozen):
    """Where the pipeline takes the source from."""

    connection_arn: str = Field(
        description="CodeConnections connection ARN (created and authorised once in the console)."
    )
    repository: str = Field(description="Repository as OWNER/NAME.")
    branch: str = Field(min_length=1, description="Branch whose commits start the pipeline.")

    @field_validator("connection_arn")
    @classmethod
    def _arn(cls, v: str) -> str:
        if not CONNECTION_ARN_RE.match(v):
            raise ValueError(
                f"{v!r} is not a CodeConnections connection ARN; expected "
                "arn:aws:codeconnections:REGION:ACCOUNT:connection/UUID"
            )
        return v

    @field_validator("repository")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not REPOSITORY_RE.match(v):
            raise ValueError(f"{v!r} is not a repository; expected OWNER/NAME, e.g. example-org/hyperpod-ray-platform")
        return v


class PipelineConfig(Frozen):
    """The delivery pipeline (CDK Pipelines) and the environments it deploys, in order."""

    account: AccountId = Field(description="Tooling account that hosts the pipeline, 12 digits (quote it in YAML).")
    region: RegionName = Field(description="Region of the pipeline.")
    pipeline_name: str = Field(pattern=r"^[A-Za-z0-9.@_-]{1,100}$", description="CodePipeline name.")
    source: Source = Field(description="The source repository.")
    stages: list[str] = Field(
        min_length=1,
        description="Environments (config/NAME.yaml) deployed in order, each once; production ones after all others.",
    )
    docker_hub_credential_secret_arn: str = Field(
        description='Complete ARN of a Secrets Manager secret in the pipeline\'s account and region holding {"username": ..., "accessToken": ...} of a Docker Hub account: the asset stage signs in with it to build the workloads image (FROM rayproject/ray), instead of pulling anonymously from CodeBuild\'s shared addresses.',
    )

    @field_validator("docker_hub_credential_secret_arn")
    @classmethod
    def _docker_hub_secret(cls, v: str) -> str:
        if not SECRET_ARN_RE.match(v):
            raise ValueError(
                f"{v!r} is not the complete ARN of a Secrets Manager secret; expected "
                "arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-XXXXXX (the ARN `aws secretsmanager describe-secret` prints)"
            )
        return v

    @model_validator(mode="after")
    def _docker_hub_secret_here(self) -> PipelineConfig:
        m = SECRET_ARN_RE.match(self.docker_hub_credential_secret_arn)
        assert m is not None  # the field's own validator
        if (m["account"], m["region"]) != (self.account, self.region):
            raise ValueError(
                f"docker_hub_credential_secret_arn: {self.docker_hub_credential_secret_arn!r} is in account "
                f"{m['account']}, region {m['region']}; the asset stage reads a secret of the pipeline's own "
                f"account and region ({self.account}, {self.region})"
            )
        return self


def pipeline_selected(value: object) -> bool:
    """The ``-c pipeline=...`` context value: true/false (the CLI passes strings)."""
    if value is None or value is False:
        return False
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ConfigError("-c pipeline", [f"pipeline: {value!r} is not a switch; allowed: true or false"])


def stage_order_errors(stages: list[tuple[int, str]], environments: dict[str, EnvironmentConfig]) -> list[str]:
    """Every non-production environment must come before every production one (dev before
    prod): a production stage must never be the first to see a change."""
    errors: list[str] = []
    first_prod: tuple[int, str] | None = None
    for i, name in stages:
        env = environments.get(name)
        if env is None:
            continue
        if env.production and first_prod is None:
            first_prod = (i, name)
        elif not env.production and first_prod is not None:
            j, prod = first_prod
            names = [s for _, s in stages if s in environments]
            order = [s for s in names if not environments[s].production] + [
                s for s in names if environments[s].production
            ]
            errors.append(
                f"stages[{j}]: production environment {prod!r} comes before non-production {name!r} "
                f"(stages[{i}]); production stages must come after every non-production one, "
                f"e.g. [{', '.join(order)}]"
            )
    return errors


def parse_pipeline(
    data: Any, *, source: str = PIPELINE_FILE, config_dir: Path = CONFIG_DIR, place: Place | None = None
) -> tuple[PipelineConfig, list[EnvironmentConfig]]:
    """Validate the pipeline config and load every environment it names, in its order.

    Raises ConfigError listing every problem (unknown environments, duplicates, order)."""
    if not isinstance(data, dict):
        raise ConfigError(source, ["the file must hold a mapping of keys to values"])
    errors: list[str] = []
    try:
        pipeline = PipelineConfig.model_validate(data)
    except ValidationError as err:
        errors += format_validation_error(err, PipelineConfig, place)
        pipeline = None
    stages = data.get("stages") if isinstance(data.get("stages"), list) else []
    known = known_environments(config_dir)
    environments: dict[str, EnvironmentConfig] = {}
    seen: dict[str, int] = {}
    for i, name in enumerate(stages):
        if not isinstance(name, str):
            continue
        if name in seen:
            errors.append(
                with_place(
                    f"stages[{i}]: {name!r} is already stages[{seen[name]}]; each environment is deployed once",
                    (),
                    place,
                )
            )
            continue
        seen[name] = i
        if name not in known:
            errors.append(
                with_place(
                    f"stages[{i}]: unknown environment {name!r}; known environments: {', '.join(known)}", (), place
                )
            )
            continue
        try:
            environments[name] = load_checked(name, config_dir)
        except ConfigError as err:
            errors += [f"stages[{i}] ({name}): {e}" for e in err.errors]
    errors += [with_place(e, (), place) for e in stage_order_errors([(i, n) for n, i in seen.items()], environments)]
    if errors or pipeline is None:
        raise ConfigError(source, errors)
    return pipeline, [environments[n] for n in pipeline.stages]


def load_pipeline(config_dir: Path = CONFIG_DIR) -> tuple[PipelineConfig, list[EnvironmentConfig]]:
    path = config_dir / PIPELINE_FILE
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise ConfigError(PIPELINE_FILE, [f"{path} is missing; the pipeline needs it"]) from None
    return parse_pipeline(read_yaml(text, path), config_dir=config_dir, place=places_of(text, path))
