"""Review artifacts for a synthesized cloud assembly: a Markdown/HTML report for reviewers
(resources, IAM, security groups, encryption, internet exposure, replacement risks,
acknowledgements, cost) with an optional diff against a previous assembly, and an architecture
diagram drawn with graphviz from the templates.

Self-contained: it reads only ``cdk.out`` (manifest, templates, metadata files), the price table
beside this module and the CloudFormation resource schemas shipped with cfn-lint.

Run it as ``python -m review cdk.out [--compare OLD_CDK_OUT]``.
"""
