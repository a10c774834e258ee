"""The lock files install anywhere: `make synth` gets a small closed set, `make test` its superset,
and every pin names a release the public package index serves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ["requirements.lock", "requirements-synth.lock", "requirements-checkov.lock"]
# What only the tests, workloads and rehearsals need: never part of a synth install.
WORKLOAD_ONLY = {"ray", "torch", "pyarrow", "pandas", "matplotlib", "moto", "fastapi", "uvicorn", "pytest"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", requirement.split("[")[0]).lower()


def pins(path: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{path}: {line!r} is not pinned with =="
        found[_name(name)] = version
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_no_local_build_labels(lock):
    """`torch==2.13.0+cpu` exists only on some indexes; ==2.13.0 matches the CPU build too."""
    assert {name: v for name, v in pins(lock).items() if "+" in v} == {}


def test_synth_lock_is_a_subset_of_the_full_lock_at_the_same_versions():
    full, synth = pins("requirements.lock"), pins("requirements-synth.lock")
    assert {name: (v, full.get(name)) for name, v in synth.items() if full.get(name) != v} == {}


def test_synth_install_has_no_workload_packages():
    assert sorted(WORKLOAD_ONLY & set(pins("requirements-synth.lock"))) == []
    assert set(pins("requirements.lock")) >= WORKLOAD_ONLY


@pytest.mark.parametrize(
    ("source", "lock"),
    [
        ("requirements-synth.in", "requirements-synth.lock"),
        ("requirements.in", "requirements.lock"),
    ],
)
def test_every_top_level_pin_is_locked_at_its_version(source, lock):
    locked = pins(lock)
    assert {name: (v, locked.get(name)) for name, v in pins(source).items() if locked.get(name) != v} == {}


# What a training worker imports before its first step (Ray Train, DCP and FSDP2, which bring
# sympy; the config models, which bring pydantic and PyYAML).
WORKER_IMPORTS = """
import ray.train.torch
import torch.distributed.checkpoint.state_dict
import torch.distributed.fsdp
import config.job_settings
import workloads.common.checkpoint
import workloads.training.job
import os, sys, sysconfig
site = sysconfig.get_path("purelib")
for module in list(sys.modules.values()):
    source, cached = getattr(module, "__file__", None), module.__dict__.get("__cached__")
    if isinstance(source, str) and source.startswith(site) and source.endswith(".py"):
        if isinstance(cached, str) and not os.path.exists(cached):
            print(module.__name__)
"""


def test_what_a_training_worker_imports_from_the_venv_is_byte_compiled():
    """Every Ray worker imports torch's DCP (sympy) and the config models (pydantic) as it starts.
    Without their bytecode, a shell with PYTHONDONTWRITEBYTECODE=1 (as here) compiles them again in
    every process, a restart's largest avoidable cost (docs/benchmarks.md, "Recovery from a node
    loss"). `make deps` compiles them; the check writes no bytecode of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, "-c", WORKER_IMPORTS], env=env, capture_output=True, text=True, check=True)
    uncompiled = sorted({name.split(".")[0] for name in run.stdout.split()})
    assert uncompiled == [], f"packages without bytecode: {uncompiled}; run `make deps` to compile them"
