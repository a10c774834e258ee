"""Facts the deploy-time parts share and the cluster's runtime does not read: Kubernetes names
(constructs/ and manifests/), the EKS add-ons' values, where ``hpray submit job`` uploads code and
the CLI's IAM permission table. A subpackage of config (the bottom layer), kept out of the
workloads image: the image ships config's own modules (``config/*.py``), each one the runtime
imports (tests/workloads/test_image.py)."""
