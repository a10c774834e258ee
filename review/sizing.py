"""The review report's "Sizing" section: the training job's checkpoint against FSx for Lustre and
its expected goodput (sizing/storage.py, sizing/goodput.py), read from the environment's plan;
the same row as docs/reference/sizing.md."""

from __future__ import annotations

from config import ConfigError, known_environments, load_environment
from review.document import Document
from sizing import storage
from sizing.plan import checkpoint_interval_warning, plan_of


def sizing_section(doc: Document, env: str) -> None:
    doc.heading("Sizing: checkpoints, FSx and goodput")
    if env not in known_environments():
        doc.para(f"No config/{env}.yaml: the sizing of this assembly's training job is not known here.")
        return
    try:
        config = load_environment(env)
    except ConfigError as err:  # synth refuses such a config; a stale assembly may still be reviewed
        doc.para(f"config/{env}.yaml does not load: {'; '.join(err.errors)}")
        return
    doc.para(storage.ASSUMPTIONS)
    doc.table(storage.TABLE_HEADERS, [storage.table_row(config.name, plan_of(config).checkpoint)])
    warning = checkpoint_interval_warning(config)
    if warning:
        doc.para(f"Synth warns: {warning}.")
