"""Where checkpoints live: a shared POSIX path (FSx at /fsx/... on the cluster, a local directory
in rehearsal) or S3 (``s3://bucket/prefix``), both through ``pyarrow.fs`` as Ray Train does.

``filesystem_for(storage)`` returns ``(pyarrow.fs.FileSystem, path_inside_it)``.

S3 credentials: pyarrow's S3 filesystem (the AWS SDK for C++) does not use EKS Pod Identity
credentials (ray-project/ray#50823). When the Pod Identity variables are present
(``AWS_CONTAINER_CREDENTIALS_FULL_URI`` + ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``), the
credentials are resolved with botocore (which supports Pod Identity) and passed to pyarrow
explicitly; they are temporary, so jobs longer than their lifetime should use IRSA
(``AWS_WEB_IDENTITY_TOKEN_FILE``, which the C++ SDK reads itself) or the FSx path, whose data
repository association exports checkpoints to the S3 bucket. ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL`` point it at an S3-compatible endpoint (the tests' local moto server).
"""

from __future__ import annotations

import os
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
    """An S3 filesystem with credentials that work on EKS (see the module docstring)."""
    kwargs: dict = {"region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
    endpoint, scheme = _endpoint()
    if endpoint:
        kwargs.update(endpoint_override=endpoint, scheme=scheme)
    if os.environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI") and not os.environ.get("AWS_ACCESS_KEY_ID"):
        import botocore.session

        creds = botocore.session.get_session().get_credentials()
        if creds is None:
            raise RuntimeError("EKS Pod Identity variables are set but botocore found no credentials")
        frozen = creds.get_frozen_credentials()
        kwargs.update(access_key=frozen.access_key, secret_key=frozen.secret_key, session_token=frozen.token)
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
