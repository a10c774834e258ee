"""cdk.json sets every feature flag the pinned aws-cdk-lib recommends (so `cdk synth` warns about
none); the few kept at another value are listed here with the reason."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Flags deliberately not at the recommended value: (value in cdk.json, why).
KEPT = {
    "@aws-cdk/aws-lambda:useCdkManagedLogGroup": (
        False,
        "Lambda creates /aws/lambda/<function> on a function's first run. In a deployed environment the "
        "kubectl provider and bucket-deployment handlers have run, so a CDK-managed log group of the same "
        "name fails the deploy (AlreadyExists). Enabling it needs those log groups imported first.",
    ),
    "@aws-cdk/core:enableAdditionalMetadataCollection": (
        False,
        "It records each L2 construct's props for CDK's usage telemetry, which reaches AWS only through the "
        "CDKMetadata resource; versionReporting is off in cdk.json, so nothing reads them. Collecting them cost "
        "every synth time and metadata in the assembly (docs/benchmarks.md, Synth); the templates are the same.",
    ),
    "@aws-cdk/core:defaultCrossStackReferences": (
        "strong",
        "Strong references (exports) stop the network and storage stacks, which hold the data, from being "
        "deleted while the cluster and HyperPod stacks use them. A deployed app moves to weak in two "
        "deploys ('both', then 'weak'), never in one.",
    ),
}


def recommended_flags() -> dict:
    """The recommended values shipped inside the installed aws-cdk-lib (without starting jsii)."""
    spec = importlib.util.find_spec("aws_cdk")
    assert spec and spec.submodule_search_locations
    (bundle,) = Path(next(iter(spec.submodule_search_locations)), "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    with tarfile.open(bundle) as tgz:
        member = tgz.extractfile("package/recommended-feature-flags.json")
        assert member is not None
        return json.load(member)


def test_every_recommended_flag_is_set_and_each_exception_has_a_reason():
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    recommended = recommended_flags()
    assert sorted(set(recommended) - set(context)) == []
    differing = {flag: context[flag] for flag, value in recommended.items() if context[flag] != value}
    assert differing == {flag: value for flag, (value, _) in KEPT.items()}
    assert all(len(reason) > 40 for _, reason in KEPT.values())
