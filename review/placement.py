"""The review report's "Placement" section: every node pool of the environment with its pods and
what they take of the nodes' allocatable CPU, memory and GPUs, as configured and in the
transients sizing/placement.py checks (a RayService upgrade, HyperPod replacing a node)."""

from __future__ import annotations

from manifests import registry
from review.document import Document
from review.environment import environment_section
from sizing import placement


def placement_section(doc: Document, env: str) -> None:
    config = environment_section(doc, env, heading="Placement", subject="the placement of this assembly's pods")
    if config is None:
        return
    doc.para(
        "Every pod the platform runs, on the node pool it selects (nodeSelector, node affinity, "
        "tolerations), first-fit on each node's allocatable: the EKS AMI's kube-reserved, eviction "
        "threshold and max pods (config/catalog.py). Synth fails when a pod does not fit."
    )
    doc.table(placement.TABLE_HEADERS, placement.table(config, registry.plan_of(config)))
