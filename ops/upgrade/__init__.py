"""``upgrade plan`` (its command line: ops/commands/upgrade.py): plan.py (the ordered steps and the
safe ones ``--apply`` does) and kuberay_crds.py (the pinned KubeRay CRDs, fetched and verified)."""
