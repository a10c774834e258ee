"""Errors the CLI reports as a message and a fix, never as a traceback."""

from __future__ import annotations

# Exit codes, documented in ``python -m ops --help``.
EXIT_OK = 0
EXIT_FAILED = 1  # a preflight check failed, the platform is unhealthy, or the job failed
EXIT_USAGE = 2  # bad command line or invalid environment config (argparse also uses 2)
EXIT_AWS = 3  # AWS credentials, permissions, throttling or connectivity
EXIT_NO_SUCH_JOB = 4  # the named RayJob does not exist
EXIT_NO_CLUSTER_ACCESS = 5  # the Kubernetes API is unreachable or refuses this identity
EXIT_QUOTA = 6  # a namespace ResourceQuota refused the job
EXIT_UNSCHEDULABLE = 7  # the job's pods cannot be scheduled (the scheduler's reason is shown)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), the shell convention
EXIT_PIPE = 141  # stdout closed early (`hpray ... | head`): 128 + SIGPIPE, as a killed process


class OpsError(Exception):
    """A problem the operator can fix: what went wrong, and how to fix it."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def render(self) -> str:
        lines = [f"error: {self.message}"]
        if self.fix:
            lines.append(f"fix:   {self.fix}")
        return "\n".join(lines)


class UsageError(OpsError):
    """A bad command line: an option's value, a missing or extra argument, an unusable file it
    names. Found before any AWS or Kubernetes call."""

    exit_code = EXIT_USAGE


class AwsError(OpsError):
    """Any AWS-side problem: permissions, throttling, endpoints, unexpected API errors."""

    exit_code = EXIT_AWS


class CredentialsError(AwsError):
    """No usable AWS credentials: nothing else can work, so commands stop here."""


class AccessDeniedError(AwsError):
    def __init__(self, message: str, fix: str | None = None, *, action: str):
        super().__init__(message, fix)
        self.action = action


class ThrottledError(AwsError):
    pass


class NotFoundError(OpsError):
    """The resource a call named does not exist (AWS or Kubernetes): often a normal answer, which
    status and preflight turn into a row; elsewhere a plain failure (exit 1)."""


class KubernetesError(OpsError):
    """The Kubernetes API could not be reached or refused a call."""


class ClusterAccessError(KubernetesError):
    """No cluster access: the API cannot be reached, or it does not accept this identity."""

    exit_code = EXIT_NO_CLUSTER_ACCESS


class QuotaExceededError(KubernetesError):
    """A ResourceQuota of the namespace refused an object (the API's 403 "exceeded quota")."""

    exit_code = EXIT_QUOTA


class JobNotFoundError(NotFoundError):
    exit_code = EXIT_NO_SUCH_JOB


class UnschedulableError(OpsError):
    exit_code = EXIT_UNSCHEDULABLE
