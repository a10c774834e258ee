"""The ``jobs:`` section (issue 37): the S3 locations users' jobs may read, checked at load."""

from __future__ import annotations

import pytest

from tests.config.config_data import config_errors, env_data


def test_read_locations_default_to_none():
    from config import parse_environment

    assert parse_environment(env_data("dev")).jobs.read_locations == []


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "my-bucket/corpus/",
            "'my-bucket/corpus/': allowed: s3://BUCKET/ or s3://BUCKET/PREFIX/ (a prefix ends with /)",
        ),
        ("s3://my-bucket/corpus", "'s3://my-bucket/corpus': a prefix ends with /; allowed: s3://my-bucket/corpus/"),
        ("s3://My_Bucket/", "'s3://My_Bucket/': 'My_Bucket' is not an S3 bucket name; allowed: 3-63 lowercase letters"),
        ("s3://my-bucket/data/*/", "'s3://my-bucket/data/*/': no wildcards or empty path parts"),
    ],
)
def test_a_bad_read_location_is_one_line_naming_the_field_value_and_what_is_allowed(uri, message):
    errors = config_errors("dev", lambda d: d.setdefault("jobs", {}).update(read_locations=[uri]))
    assert len(errors) == 1, errors
    assert "jobs.read_locations" in errors[0] and message in errors[0], errors
