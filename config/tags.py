"""The `tags:` section: cost-allocation tags on every resource."""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, model_validator

from config.base import Frozen

REQUIRED_TAGS = ("Project", "Environment", "Owner", "CostCenter")
# AWS tag limits (Tagging AWS resources, "Tag naming limits and requirements"): keys 1-128 and
# values 0-256 Unicode characters of letters, digits, spaces and + - = . _ : / @; the aws:
# prefix is reserved. CloudFormation accepts longer values at synth and fails at deploy.
TAG_KEY_MAX, TAG_VALUE_MAX = 128, 256
_TAG_CHARS_RE = re.compile(r"^[\w\s+\-=.:/@]*$")


class Tags(Frozen):
    """Cost-allocation tags applied to every resource."""

    project: str = Field(alias="Project", description="Project tag on every resource.")
    environment: str = Field(alias="Environment", description="Environment tag on every resource.")
    owner: str | None = Field(default=None, alias="Owner", description="Owner tag; required in production.")
    cost_center: str | None = Field(
        default=None, alias="CostCenter", description="CostCenter tag; required in production."
    )
    extra: dict[str, str] = Field(
        default_factory=dict,
        alias="Extra",
        description="More tags, key to value. Keys 1-128 and values 0-256 characters of letters, digits, spaces and + - = . _ : / @; keys may not start with 'aws:'.",
    )

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _aws_limits(self) -> Tags:
        errors = []
        for key, value in self.as_dict().items():
            if not 1 <= len(key) <= TAG_KEY_MAX:
                errors.append(f"tags.{key[:40]}: the key is {len(key)} characters; AWS allows 1-{TAG_KEY_MAX}")
            if key.lower().startswith("aws:"):
                errors.append(f"tags.{key}: keys starting with 'aws:' are reserved by AWS")
            if len(value) > TAG_VALUE_MAX:
                errors.append(
                    f"tags.{key}: the value is {len(value)} characters; AWS allows at most "
                    f"{TAG_VALUE_MAX} in a tag value"
                )
            for what, text in (("key", key), ("value", value)):
                if not _TAG_CHARS_RE.match(text):
                    errors.append(
                        f"tags.{key[:40]}: the {what} {text[:40]!r} has characters AWS does not allow "
                        "in tags; allowed: letters, digits, spaces and + - = . _ : / @"
                    )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def as_dict(self) -> dict[str, str]:
        tags = {"Project": self.project, "Environment": self.environment}
        if self.owner:
            tags["Owner"] = self.owner
        if self.cost_center:
            tags["CostCenter"] = self.cost_center
        tags.update(self.extra)
        return dict(sorted(tags.items()))
