"""Where checkpoints live: a shared POSIX path (FSx at /fsx/... on the cluster, a local directory
in rehearsal) or S3 (``s3://bucket/prefix``), both through ``pyarrow.fs`` as Ray Train does.

``filesystem_for(storage)`` returns ``(pyarrow.fs.FileSystem, path_inside_it)``.

S3 credentials come from pyarrow's default chain (the AWS SDK for C++'s
``DefaultAWSCredentialsProviderChain``), nothing is passed explicitly. On EKS that chain reads
Pod Identity itself (``AWS_CONTAINER_CREDENTIALS_FULL_URI`` + ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``,
its ``GeneralHTTPCredentialsProvider``) and fetches new credentials 5 s before their
Expiration, so a filesystem object keeps working for the whole job;
tests/workloads/common/test_s3_pod_identity.py proves it against rotating credentials.
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` point it at an S3-compatible endpoint (the
tests' local moto server).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs


def is_s3(storage: str) -> bool:
    return storage.startswith("s3://")


def is_shared_posix(storage: str) -> bool:
    """True for paths every node sees: FSx under /fsx, or anything the caller declared shared."""
    return storage.startswith("/fsx/") or storage == "/fsx"


def _endpoint() -> tuple[str | None, str | None]:
    url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return None, None
    parsed = urlparse(url)
    return parsed.netloc or parsed.path, parsed.scheme or "https"


def s3_filesystem() -> pafs.S3FileSystem:
    """An S3 filesystem on the default credential chain (see the module docstring)."""
    kwargs: dict[str, Any] = {
        "region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    }
    endpoint, scheme = _endpoint()
    if endpoint:
        kwargs.update(endpoint_override=endpoint, scheme=scheme)
    return pafs.S3FileSystem(**kwargs)


def filesystem_for(storage: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a local/shared directory or an ``s3://bucket/prefix`` URI."""
    if is_s3(storage):
        parsed = urlparse(storage)
        return s3_filesystem(), f"{parsed.netloc}{parsed.path}".rstrip("/")
    if "://" in storage:
        raise ValueError(f"storage {storage!r}: only POSIX paths and s3:// URIs are supported")
    return pafs.LocalFileSystem(), os.path.abspath(storage)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])
