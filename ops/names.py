"""Names of the deployed resources, derived from the config exactly as the CDK app derives them.

Kept here (not imported from ``stacks/``) so that the CLI never loads aws_cdk / jsii; a test pins
these against ``stacks.platform``.
"""

from __future__ import annotations

from config.environment import EnvironmentConfig


def stack_prefix(config: EnvironmentConfig) -> str:
    """``hpray-dev`` -> ``HprayDev`` (same rule as stacks.platform.stack_prefix)."""
    return "".join(part.capitalize() for part in config.name_prefix.split("-"))


def stack_names(config: EnvironmentConfig) -> dict[str, str]:
    prefix = stack_prefix(config)
    return {"network": f"{prefix}Network", "storage": f"{prefix}Storage"}


# The storage stack's CfnOutput that holds the FSx for Lustre file system ID.
FILE_SYSTEM_OUTPUT = "FileSystemId"
