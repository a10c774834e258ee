"""The CLI derives stack names itself (it must not load aws_cdk); they must match the app's."""

from __future__ import annotations

import pytest

from config import load_environment
from ops.reports.names import stack_names


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_stack_names_match_the_cdk_app(env):
    from stacks.platform import stack_prefix

    config = load_environment(env)
    assert stack_names(config) == {
        "network": f"{stack_prefix(config.name_prefix)}Network",
        "storage": f"{stack_prefix(config.name_prefix)}Storage",
    }


def test_the_cli_does_not_import_aws_cdk():
    import subprocess
    import sys

    code = "import sys, ops.cli, ops.reports.preflight, ops.reports.status, ops.submit.follow, ops.clients.kube; sys.exit('aws_cdk' in sys.modules or 'ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
