"""The `fsx:` and `storage:` sections: FSx for Lustre and the checkpoint bucket."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from config import catalog
from config.base import Frozen


class Fsx(Frozen):
    """FSx for Lustre, shared by every node at /fsx and linked to the checkpoint bucket."""

    deployment_type: Literal["PERSISTENT_2"] = Field(
        default="PERSISTENT_2", description="FSx for Lustre deployment type."
    )
    storage_capacity_gib: int = Field(
        default=1200,
        description="Capacity, GiB: 1200, 2400, then multiples of 2400. A decrease replaces the file system.",
    )
    throughput_mb_s_per_tib: int = Field(
        default=125,
        description="Per-unit storage throughput, MB/s per TiB.",
        json_schema_extra={"enum": list(catalog.FSX_PERSISTENT_2_THROUGHPUT)},
    )
    # The burst check (sizing/storage.py): a checkpoint's bytes at this file system's throughput
    # against this share of the checkpoint interval. The data repository association's export to
    # S3 reads the same bytes back out at the same throughput, so at 0.5 the write and the export
    # together take the whole interval; 0.25 leaves half of it to the data loader and restores.
    checkpoint_write_share: float = Field(
        default=0.25,
        gt=0,
        le=0.5,
        description=(
            "Share of the training checkpoint interval (training.checkpoint_every_steps at the estimated step time) "
            "one checkpoint may take to write at this file system's throughput (storage_capacity_gib x "
            "throughput_mb_s_per_tib); synth fails when it would take longer. At most 0.5: the export to S3 reads "
            "the same bytes back out."
        ),
    )
    data_compression: Literal["LZ4", "NONE"] = Field(default="LZ4", description="Data compression of the file system.")
    file_system_path: str = Field(
        default="/checkpoints",
        description="Directory in the file system linked to the checkpoint bucket (data repository association); pods see it under /fsx.",
    )
    import_export_prefix: str = Field(
        default="checkpoints/",
        description="Prefix in the checkpoint bucket the association imports from and exports to, ending in '/'.",
    )

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, v: int) -> int:
        # PERSISTENT_2: 1200 GiB, 2400 GiB, then increments of 2400 GiB (AWS FSx for Lustre docs).
        if v < 1200 or (v != 1200 and v % 2400 != 0):
            raise ValueError(
                f"{v} GiB is not a PERSISTENT_2 storage capacity; allowed: 1200, 2400, then multiples of 2400 GiB"
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
    """Lifecycle rules of the checkpoint bucket."""

    checkpoint_noncurrent_version_expiration_days: int = Field(
        default=30, ge=1, le=3650, description="Days an overwritten or deleted checkpoint version stays recoverable."
    )
    abort_incomplete_multipart_upload_days: int = Field(
        default=7,
        ge=1,
        le=365,
        description="Days after which incomplete multipart uploads (from killed workers) are aborted.",
    )
