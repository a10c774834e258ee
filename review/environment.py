"""The opening of a review section that reads the environment's config (placement, sizing): its
heading, then the config, or a paragraph saying why this assembly's config is not known here."""

from __future__ import annotations

from config import ConfigError, known_environments
from config.environment import EnvironmentConfig
from manifests.check import load_checked
from review.document import Document


def environment_section(doc: Document, env: str, *, heading: str, subject: str) -> EnvironmentConfig | None:
    """Starts the section ``heading`` and returns ``config/{env}.yaml`` loaded and checked as synth
    checks it (manifests/check.py); None, after saying
    so, when there is no such file (``subject`` is not known here) or it does not load."""
    doc.heading(heading)
    if env not in known_environments():
        doc.para(f"No config/{env}.yaml: {subject} is not known here.")
        return None
    try:
        return load_checked(env)
    except ConfigError as err:  # synth refuses such a config; a stale assembly may still be reviewed
        doc.para(f"config/{env}.yaml does not load: {'; '.join(err.errors)}")
        return None
