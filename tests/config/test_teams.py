"""config `teams`: each team's name, principals and namespace, checked with exact messages."""

from __future__ import annotations

import pytest

from config import ConfigError, parse_environment
from tests.ops.fakes import env_data

ROLE = "arn:aws:iam::111111111111:role/TeamA"


def with_teams(teams):
    data = env_data("dev")
    data["teams"] = teams
    return data


def errors_for(teams) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_environment(with_teams(teams), source="test.yaml")
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
