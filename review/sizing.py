"""The review report's "Sizing" section: the training job's checkpoint against FSx for Lustre and
its expected goodput (sizing/storage.py, sizing/goodput.py), read from the environment's plan;
the same row as docs/reference/sizing.md."""

from __future__ import annotations

from manifests import registry
from review.document import Document
from review.environment import environment_section
from sizing import storage
from sizing.plan import checkpoint_interval_warning


def sizing_section(doc: Document, env: str) -> None:
    config = environment_section(
        doc,
        env,
        heading="Sizing: checkpoints, FSx and goodput",
        subject="the sizing of this assembly's training job",
    )
    if config is None:
        return
    doc.para(storage.ASSUMPTIONS)
    doc.table(storage.TABLE_HEADERS, [storage.table_row(config.name, registry.plan_of(config).checkpoint)])
    warning = checkpoint_interval_warning(config, registry.plan_of(config))
    if warning:
        doc.para(f"Synth warns: {warning}.")
