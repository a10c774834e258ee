"""The pinned artifacts the code runs besides the CDK: the public charts, the KubeRay and Secrets
Store CRDs and the ``helm``/``kubectl`` binaries, fetched at the versions config/versions.py pins,
verified against its digests and cached (:mod:`artifacts.pinned`).

No CDK import here: the CLI, the review and workload code use it without starting jsii.
"""
