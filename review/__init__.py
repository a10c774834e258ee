"""Review artifacts for a synthesized cloud assembly: a Markdown/HTML report for reviewers
(resources, IAM, security groups, encryption, internet exposure, replacement risks,
acknowledgements, cost) with an optional diff against a previous assembly, and an architecture
diagram drawn with graphviz from the templates.

What it reads: ``cdk.out`` (manifest, templates, metadata files) and the CloudFormation resource
schemas shipped with cfn-lint, and, because a template alone does not say what runs inside the
cluster, the project's own code beneath it: the environment's config (config/, the one whose
account and region match the assembly, checked as synth checks it: manifests/check.py) and the
price table (config/prices.py); the plan (sizing/) for the placement and sizing sections; the
flow table and flow model (constructs/flows.py, constructs/flow_table.py) that it proves against
the templates; the Helm charts' pods (constructs/chart_pods.py, the pinned charts via artifacts/)
and the rendered workload manifests (workloads/) for the images and Kubernetes sections. It is an
entry point on top of the layers (tests/test_import_cycles.py): it imports none of ops/ or app.py,
and nothing but docgen/ imports it.

Run it as ``python -m review cdk.out [--compare OLD_CDK_OUT]``.
"""
