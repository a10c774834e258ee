"""The delivery pipeline's diagram: a box per stage of the synthesized pipeline, in order, one
per environment among them, and a node per approval and security check."""

from __future__ import annotations

import re

from review.assembly import load_assembly
from review.diagram import to_dot
from stacks.pipeline_config import load_pipeline
from tests.stacks.test_pipeline_stack import pipeline_app  # noqa: F401  (the synthesized pipeline)


def test_a_box_per_stage_and_a_node_per_approval(pipeline_app):  # noqa: F811
    stack, _, template, out = pipeline_app
    a = load_assembly(out)
    stacks = a.groups()[stack.artifact_id]
    dot = to_dot(stacks, env=stack.artifact_id, exports=a.exports())
    stages = next(r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline")[
        "Properties"
    ]["Stages"]
    titles = re.findall(r'label="(Stage \d+: [^"]+)"', dot)
    assert titles == [
        f"Stage {i + 1}: {s['Name']}"
        + (" (environment)" if any(x["ActionTypeId"]["Category"] == "Deploy" for x in s["Actions"]) else "")
        for i, s in enumerate(stages)
    ]
    # One stage per environment of config/pipeline.yaml, each deploying that environment's stacks.
    _, environments = load_pipeline()
    assert len([t for t in titles if t.endswith("(environment)")]) == len(environments)
    labels = [m.replace("\\n", " ") for m in re.findall(r'\[label="((?:[^"\\]|\\.)*)"', dot)]
    for s in stages:
        for action in s["Actions"]:
            name = action["Name"].replace(".", " ")
            if action["ActionTypeId"]["Category"] == "Approval":
                assert any(lb.startswith("Manual approval") and name in lb for lb in labels), name
            elif action["ActionTypeId"]["Category"] == "Deploy":
                assert any(lb.startswith(f"Deploy {name.split()[0]} into") for lb in labels), name
    approvals = [x for s in stages for x in s["Actions"] if x["ActionTypeId"]["Category"] == "Approval"]
    assert approvals and dot.count("shape=octagon") == len(approvals)
    assert "Security check" in dot and "Legend" in dot and "…" not in dot
