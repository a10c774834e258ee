"""Day-2 operations CLI for the HyperPod Ray platform: ``python -m ops --help``.

Separate from the CDK app on purpose: every AWS and Kubernetes call lives here and runs only when
an operator runs a command, never at synth time.
"""
