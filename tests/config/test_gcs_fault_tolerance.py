"""config/inference.py ``inference.gcs_fault_tolerance``: when it is on, and exact messages."""

from __future__ import annotations

import copy

import pytest
import yaml

from config import ConfigError, load_environment, parse_environment
from config.loader import CONFIG_DIR


def _data(env: str, gcs: dict, *, token_auth: bool = True) -> dict:
    data = yaml.safe_load((CONFIG_DIR / f"{env}.yaml").read_text())
    data = copy.deepcopy(data)
    data.setdefault("name", env)
    data.setdefault("eks", {})["ray_token_auth"] = token_auth
    data.setdefault("inference", {})["gcs_fault_tolerance"] = gcs
    return data


def _errors(env: str, gcs: dict, **kw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_environment(_data(env, gcs, **kw), source=f"{env}.yaml")
    return info.value.errors


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_on_wherever_the_csi_driver_delivers_secrets(env):
    cfg = load_environment(env)
    assert cfg.inference.gcs_fault_tolerance.enabled is None
    assert cfg.gcs_fault_tolerance is cfg.eks.ray_token_auth
    on = parse_environment(_data(env, {}), source=f"{env}.yaml")
    assert on.gcs_fault_tolerance is True
    off = parse_environment(_data(env, {"enabled": False}), source=f"{env}.yaml")
    assert off.gcs_fault_tolerance is False


def test_enabled_without_the_csi_driver():
    assert _errors("dev", {"enabled": True}, token_auth=False) == [
        "inference.gcs_fault_tolerance.enabled: true needs the Secrets Store CSI driver on the cluster to "
        "deliver the store's AUTH token to the head (eks.ray_token_auth: true); set eks.ray_token_auth: "
        "true, or enabled: null or false"
    ]


def test_production_needs_a_replica_and_snapshots():
    assert _errors("prod", {"replicas": 0, "snapshot_retention_days": 0}) == [
        "inference.gcs_fault_tolerance.replicas: 0 in a production environment; allowed: 1-5 (automatic "
        "failover needs a replica)",
        "inference.gcs_fault_tolerance.snapshot_retention_days: 0 in a production environment; allowed: 1-35",
    ]
    dev = parse_environment(_data("dev", {"replicas": 0, "snapshot_retention_days": 0}), source="dev.yaml")
    assert dev.inference.gcs_fault_tolerance.replicas == 0


@pytest.mark.parametrize(
    ("node_type", "message"),
    [
        (
            "cache.x9.large",
            "inference.gcs_fault_tolerance.node_type: 'cache.x9.large' is not an ElastiCache node type for the "
            "GCS store; allowed: cache.<family>.<size> with family one of t4g, t3, m7g, m6g, m5, r7g, r6g, r5",
        ),
        (
            "m7g.large",
            "inference.gcs_fault_tolerance.node_type: 'm7g.large' is not an ElastiCache node type for the "
            "GCS store; allowed: cache.<family>.<size> with family one of t4g, t3, m7g, m6g, m5, r7g, r6g, r5",
        ),
    ],
)
def test_bad_node_type(node_type, message):
    assert _errors("dev", {"node_type": node_type}) == [message]


def test_replicas_out_of_range():
    assert _errors("dev", {"replicas": 6}) == [
        "inference.gcs_fault_tolerance.replicas: Input should be less than or equal to 5 (given: 6)"
    ]
