"""The ``jobs:`` section: what an ML engineer's ``hpray submit job`` may read besides its own code.

A user job runs as the workloads role (Pod Identity of the namespace's service account), which
reaches only the S3 prefixes the environment names (constructs/flows.py ``s3_locations``): the
checkpoint bucket's, the config's own data paths, and these. A read anywhere else is denied
(docs/troubleshooting.md "AccessDenied from S3 in a job")."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config.base import Frozen

# S3 bucket names: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def _read_location(uri: str) -> str:
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r}: allowed: s3://BUCKET/ or s3://BUCKET/PREFIX/ (a prefix ends with /)")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(
            f"{uri!r}: {bucket!r} is not an S3 bucket name; allowed: 3-63 lowercase letters, digits, dots, hyphens"
        )
    if prefix and not prefix.endswith("/"):
        raise ValueError(f"{uri!r}: a prefix ends with /; allowed: s3://{bucket}/{prefix}/")
    if "*" in prefix or "//" in prefix:
        raise ValueError(f"{uri!r}: no wildcards or empty path parts; allowed: s3://BUCKET/PREFIX/")
    return uri


class Jobs(Frozen):
    """What users' jobs (``hpray submit job``) may read."""

    read_locations: list[str] = Field(
        default_factory=list,
        description=(
            "S3 locations (s3://BUCKET/ or s3://BUCKET/PREFIX/) the jobs' pods may read: list and get under "
            "each prefix, with the workloads role (the user's own datasets). Reads elsewhere are denied. "
            "A bucket encrypted with its own KMS key also needs kms:Decrypt for the role in that key's policy."
        ),
    )

    @field_validator("read_locations")
    @classmethod
    def _locations(cls, v: list[str]) -> list[str]:
        for uri in v:
            _read_location(uri)
        if len(set(v)) != len(v):
            raise ValueError(f"{sorted(u for u in set(v) if v.count(u) > 1)} listed twice; allowed: each once")
        return v
