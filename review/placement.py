"""The review report's "Placement" section: every node pool of the environment with its pods and
what they take of the nodes' allocatable CPU, memory and GPUs, as configured and in the
transients sizing/placement.py checks (a RayService upgrade, HyperPod replacing a node)."""

from __future__ import annotations

from config import ConfigError, known_environments, load_environment
from review.document import Document
from sizing import placement


def placement_section(doc: Document, env: str) -> None:
    doc.heading("Placement")
    if env not in known_environments():
        doc.para(f"No config/{env}.yaml: the placement of this assembly's pods is not known here.")
        return
    try:
        config = load_environment(env)
    except ConfigError as err:  # synth refuses such a config; a stale assembly may still be reviewed
        doc.para(f"config/{env}.yaml does not load: {'; '.join(err.errors)}")
        return
    doc.para(
        "Every pod the platform runs, on the node pool it selects (nodeSelector, node affinity, "
        "tolerations), first-fit on each node's allocatable: the EKS AMI's kube-reserved, eviction "
        "threshold and max pods (config/catalog.py). Synth fails when a pod does not fit."
    )
    doc.table(placement.TABLE_HEADERS, placement.table(config))
