"""Day-2 operations CLI for the HyperPod Ray platform: ``python -m ops --help``.

Separate from the CDK app on purpose: every AWS and Kubernetes call lives here and runs only when
an operator runs a command, never at synth time.

Layout, commands over clients:

- ``cli.py``: the entry point (``hpray``, ``python -m ops``): builds the parser from the commands,
  runs the chosen one, turns errors into messages and exit codes.
- ``commands/``: one module per command verb, each defining its ``COMMAND`` (``context.CommandSpec``).
- ``clients/``: AWS, the cluster's Kubernetes API (or a kubeconfig's), a Ray head through it.
- ``submit/``, ``jobs/``, ``reports/``, ``upgrade/``: what the commands run on, by concern;
  ``kuberay.py``: what KubeRay's objects say, shared by them.
- plumbing: ``context.py`` (what a command is and runs with), ``usage.py`` (parsers, shared
  options, usage errors), ``errors.py`` (errors and exit codes), ``output.py`` (tables, JSON),
  ``version.py``; ``permissions.py``: the IAM actions each command calls.
"""
