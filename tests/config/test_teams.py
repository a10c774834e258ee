"""config `teams`: each team's name, principals and namespace, checked with exact messages."""

from __future__ import annotations

import pytest

from config import ConfigError, parse_environment
from manifests import registry
from manifests.check import parse_checked
from tests.ops.fakes import env_data

ROLE = "arn:aws:iam::111111111111:role/TeamA"


def with_teams(teams):
    data = env_data("dev")
    data["teams"] = teams
    return data


def errors_for(teams) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_checked(with_teams(teams), source="test.yaml")
    return err.value.errors


def test_a_team_gets_defaults():
    config = parse_environment(with_teams([{"name": "vision", "principal_arns": [ROLE]}]), source="test.yaml")
    team = config.teams[0]
    assert team.resolved_namespace == "team-vision"
    assert (team.quota.gpus, team.quota.rayjobs) == (8, 10)
    assert parse_environment(env_data("dev"), source="t").teams == []


@pytest.mark.parametrize(
    ("team", "message"),
    [
        (
            {"name": "Vision", "principal_arns": [ROLE]},
            "teams[0].name: 'Vision' is not a team name; allowed: 1-20 lowercase letters, digits and hyphens, starting with a letter",
        ),
        (
            {"name": "vision", "principal_arns": ["arn:aws:iam::1:role/x"]},
            "teams[0].principal_arns: 'arn:aws:iam::1:role/x' is not an IAM role or user ARN; expected arn:aws:iam::123456789012:role/NAME",
        ),
        (
            {"name": "vision", "principal_arns": [ROLE], "namespace": "kube-system"},
            "teams[0].namespace: 'kube-system' is a platform namespace; reserved: amazon-cloudwatch, aws-hyperpod, default, kube-node-lease, kube-public, kube-system, kuberay-system, ray-workloads",
        ),
        (
            {"name": "vision", "principal_arns": []},
            "teams[0].principal_arns: List should have at least 1 item after validation, not 0 (given: list)",
        ),
    ],
)
def test_invalid_team(team, message):
    assert errors_for([team]) == [message]


def test_names_namespaces_and_principals_belong_to_one_team():
    errors = errors_for(
        [{"name": "a", "principal_arns": [ROLE]}, {"name": "b", "principal_arns": [ROLE], "namespace": "team-a"}]
    )
    assert any(
        "teams[1]: namespace 'team-a' is already team 'a''s; each namespace belongs to one team" in e for e in errors
    ), errors
    assert any(
        f"teams[1]: principal {ROLE!r} is already team 'a''s; each principal belongs to one team" in e for e in errors
    ), errors
    admin = env_data("dev")["eks"]["admin_principal_arns"][0]
    errors = errors_for([{"name": "a", "principal_arns": [admin]}])
    assert any(
        f"teams[0].principal_arns: {admin!r} is in eks.admin_principal_arns; a principal has one access entry" in e
        for e in errors
    ), errors


def test_a_quota_that_holds_no_whole_node_job_is_refused_and_the_table_shows_where_team_pods_run():
    """`hpray submit job` asks whole nodes: a quota below one node's worker pod and a head would
    refuse every job of the team (sizing/placement.team_problems)."""
    from sizing import placement, pods

    team = {"name": "vision", "principal_arns": [ROLE], "quota": {"gpus": 2}}
    assert errors_for([team]) == [
        "teams[0].quota: gpus 2, cpus 192, memory_gib 1536 hold no job of team 'vision': one job is a Ray head "
        "(1 CPU, 4Gi) and at least one whole node's worker pod (smallest: ml.g5.12xlarge in 'gpu-workers', 4 GPUs, "
        "23 CPUs, 168 GiB); allowed: gpus 0 (no GPU jobs), or at least gpus 4, cpus 24, memory_gib 172"
    ]
    # The figures are the worker pod `submit job` renders for one node of that group.
    config = parse_environment(with_teams([{**team, "quota": {"gpus": 8}}]), source="test.yaml")
    worker = pods.job_worker(config, config.hyperpod.group("gpu-workers"), 1)
    assert (worker.gpus, worker.cpus, worker.memory_gib) == (4, 23, 168)
    assert errors_for([{**team, "quota": {"gpus": 4, "cpus": 23, "memory_gib": 172}}])[0].startswith(
        "teams[0].quota: gpus 4, cpus 23, memory_gib 172 hold no job"
    )
    assert parse_environment(with_teams([{**team, "quota": {"gpus": 0}}]), source="t").teams[0].quota.gpus == 0
    assert placement.team_rows(config) == [
        "  [team vision] namespace team-vision: Ray heads on system (1 CPU, 4Gi each, at most 10 RayJobs); workers "
        "on whole nodes of gpu-workers (ml.g5.12xlarge, 4 GPUs/node: at most 2 nodes); quota 8 GPUs, 192 CPUs, 1536 GiB"
    ]
    assert placement.render_table(config, plan=registry.plan_of(config)).endswith(placement.team_rows(config)[0])


def test_a_platform_prefix_under_the_teams_prefix_is_refused():
    data = with_teams([{"name": "a", "principal_arns": [ROLE]}])
    data.setdefault("fsx", {})["import_export_prefix"] = "teams/a/"
    with pytest.raises(ConfigError) as err:
        parse_environment(data, source="test.yaml")
    assert err.value.errors == [
        "fsx.import_export_prefix: 'teams/a/' is under teams/ of the checkpoint bucket, where each team's pods "
        "read and write their own prefix; allowed: any prefix outside teams/"
    ]
    # Without teams the prefix is the platform's alone.
    data.pop("teams")
    parse_environment(data, source="test.yaml")
