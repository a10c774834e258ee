"""The `fsx:` and `storage:` sections: FSx for Lustre and the checkpoint bucket."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from config import catalog
from config.base import Frozen

class Fsx(Frozen):
    deployment_type: Literal["PERSISTENT_2"] = "PERSISTENT_2"
    storage_capacity_gib: int = 1200
    throughput_mb_s_per_tib: int = 125
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    # Directory in the file system linked to the checkpoint bucket by a data repository association.
    file_system_path: str = "/checkpoints"
    # Prefix in the checkpoint bucket that the association imports from and exports to.
    import_export_prefix: str = "checkpoints/"

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, v: int) -> int:
        # PERSISTENT_2: 1200 GiB, 2400 GiB, then increments of 2400 GiB (AWS FSx for Lustre docs).
        if v < 1200 or (v != 1200 and v % 2400 != 0):
            raise ValueError(
                f"{v} GiB is not a PERSISTENT_2 storage capacity; allowed: 1200, 2400, then "
                "multiples of 2400 GiB"
            )
        return v

    @field_validator("throughput_mb_s_per_tib")
    @classmethod
    def _throughput(cls, v: int) -> int:
        if v not in catalog.FSX_PERSISTENT_2_THROUGHPUT:
            raise ValueError(
                f"{v} MB/s/TiB is not a PERSISTENT_2 per-unit storage throughput; allowed: "
                + ", ".join(str(t) for t in catalog.FSX_PERSISTENT_2_THROUGHPUT)
            )
        return v

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not re.match(r"^/[A-Za-z0-9_./-]{1,4095}$", v) or v == "/":
            raise ValueError(f"{v!r} is not a file system path; expected an absolute path like /checkpoints")
        return v

    @field_validator("import_export_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/$", v):
            raise ValueError(f"{v!r} is not an S3 prefix; expected a relative path ending in '/', e.g. checkpoints/")
        return v


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


class Storage(Frozen):
    # Non-current checkpoint versions are kept this long so an overwritten checkpoint can be recovered.
    checkpoint_noncurrent_version_expiration_days: int = Field(default=30, ge=1, le=3650)
    # Incomplete multipart uploads from killed workers are aborted after this many days.
    abort_incomplete_multipart_upload_days: int = Field(default=7, ge=1, le=365)
