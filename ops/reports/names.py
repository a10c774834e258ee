"""Names of the deployed resources, derived from the config exactly as the CDK app derives them.

Kept here (not imported from ``stacks/``) so that the CLI never loads aws_cdk / jsii; both sides
take the prefix from ``config.facts.names.stack_prefix``.
"""

from __future__ import annotations

from config.environment import EnvironmentConfig
from config.facts.names import stack_prefix


def stack_names(config: EnvironmentConfig) -> dict[str, str]:
    prefix = stack_prefix(config.name_prefix)
    return {"network": f"{prefix}Network", "storage": f"{prefix}Storage"}


# The storage stack's CfnOutput that holds the FSx for Lustre file system ID.
FILE_SYSTEM_OUTPUT = "FileSystemId"
