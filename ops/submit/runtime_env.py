"""``submit job --runtime-env FILE``: a Ray runtime_env from a YAML or JSON file, as
``ray job submit --runtime-env`` takes it, checked before anything is uploaded.

The job's working directory is what ``hpray`` zips and uploads, so ``working_dir`` names a local
directory (the same as ``--working-dir``) and ``excludes`` adds to ``--exclude``. The pods' image is
the RayJob's (``--image``), so ``container`` and ``image_uri`` are refused; ``py_modules`` and
``java_jars`` must be remote URIs, since only the working directory is uploaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ops.errors import UsageError

# The runtime_env fields a job may set, and what each must be (Ray's RuntimeEnv.known_fields).
ALLOWED = (
    "pip",
    "uv",
    "conda",
    "env_vars",
    "py_modules",
    "java_jars",
    "py_executable",
    "worker_process_setup_hook",
    "config",
    "working_dir",
    "excludes",
)
REFUSED = {
    "container": "the job's image is the RayJob's: use --image URI",
    "image_uri": "the job's image is the RayJob's: use --image URI",
}
REMOTE_SCHEMES = ("s3://", "gs://", "https://", "http://")


@dataclass(frozen=True)
class RuntimeEnvFile:
    """What the file asks for: Ray's fields for the RayJob, and what changes the upload."""

    fields: dict[str, Any] = field(default_factory=dict)  # without working_dir, excludes, env_vars
    env_vars: dict[str, str] = field(default_factory=dict)
    working_dir: Path | None = None
    excludes: tuple[str, ...] = ()


def _fail(path: Path | str, problem: str, fix: str) -> UsageError:
    """``path``: the --runtime-env file, or the option's own name (``--runtime-env-json``)."""
    return UsageError(f"{f'--runtime-env {path}' if isinstance(path, Path) else path}: {problem}", fix)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _packages(path: Path | str, key: str, value: Any) -> None:
    packages = value.get("packages") if isinstance(value, dict) else value
    if not _strings(packages):
        raise _fail(
            path,
            f"{key} must be a list of packages, or a mapping with packages: [...]; got {value!r}",
            f"e.g. {key}: [torch==2.5.1, datasets]",
        )


def _check(path: Path | str, data: dict[str, Any]) -> None:
    for key, value in data.items():
        if key in REFUSED:
            raise _fail(path, f"{key} is not for a RayJob", REFUSED[key])
        if key not in ALLOWED:
            raise _fail(path, f"{key!r} is not a runtime_env field", f"use one of: {', '.join(ALLOWED)}")
        if key in ("pip", "uv"):
            _packages(path, key, value)
        elif key == "conda" and not isinstance(value, (str, dict)):
            raise _fail(path, f"conda must be an environment's name or its spec (a mapping); got {value!r}", "")
        elif key == "env_vars":
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise _fail(
                    path,
                    f"env_vars must map names to strings; got {value!r}",
                    'quote numbers and booleans, e.g. env_vars: {NCCL_DEBUG: INFO, OMP_NUM_THREADS: "8"}',
                )
        elif key in ("py_modules", "java_jars"):
            local = [v for v in value if not str(v).startswith(REMOTE_SCHEMES)] if _strings(value) else value
            if local:
                raise _fail(
                    path,
                    f"{key} must list remote URIs ({', '.join(REMOTE_SCHEMES)}); got {local!r}",
                    "only the working directory is uploaded: put local modules into it",
                )
        elif key in ("py_executable", "worker_process_setup_hook", "working_dir") and not isinstance(value, str):
            raise _fail(path, f"{key} must be a string; got {value!r}", "")
        elif key == "excludes" and not _strings(value):
            raise _fail(path, f"excludes must be a list of patterns; got {value!r}", "e.g. excludes: [data/, '*.ckpt']")
        elif key == "config" and not isinstance(value, dict):
            raise _fail(path, f"config must be a mapping; got {value!r}", "e.g. config: {setup_timeout_seconds: 1200}")
    if sum(k in data for k in ("pip", "uv", "conda")) > 1:
        raise _fail(
            path, "pip, uv and conda exclude each other (Ray takes one)", "list pip packages inside conda's spec"
        )


def load(path: Path) -> RuntimeEnvFile:
    """The file's runtime env, checked; a :class:`UsageError` naming the file and the field."""
    if not path.is_file():
        raise _fail(path, "no such file", "give a YAML or JSON file with the runtime_env mapping")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise _fail(path, f"not valid JSON: line {err.lineno}, column {err.colno}: {err.msg}", "fix the file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise _fail(path, f"not valid YAML: {where}{getattr(err, 'problem', None) or err}", "fix the file") from None
    return _from_mapping(path, data)


def load_json(text: str) -> RuntimeEnvFile:
    """``--runtime-env-json '{"pip": ["emoji"]}'``: the runtime env inline, as ``ray job submit``
    takes it; checked as a file's."""
    label = "--runtime-env-json"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(label, f"not valid JSON: column {err.colno}: {err.msg}", """e.g. '{"pip": ["emoji"]}'""") from None
    return _from_mapping(label, data)


def _from_mapping(path: Path | str, data: Any) -> RuntimeEnvFile:
    if not isinstance(data, dict):
        raise _fail(path, f"must hold a mapping of runtime_env fields; got {type(data).__name__}", "e.g. pip: [torch]")
    _check(path, data)
    working_dir = data.get("working_dir")
    if working_dir is not None and str(working_dir).startswith(REMOTE_SCHEMES):
        raise _fail(path, f"working_dir {working_dir!r} is remote", "name a local directory: hpray uploads it")
    rest = {k: v for k, v in data.items() if k not in ("working_dir", "excludes", "env_vars")}
    return RuntimeEnvFile(
        fields=rest,
        env_vars=dict(data.get("env_vars") or {}),
        working_dir=Path(working_dir) if working_dir is not None else None,
        excludes=tuple(data.get("excludes") or ()),
    )
