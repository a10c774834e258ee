"""Resource types that other branches are adding (EKS, HyperPod, launch templates): the report
reads them generically, checked here on synthetic templates."""

from __future__ import annotations

from review import analysis
from review.assembly import load_assembly


def _stack(assembly_dir, tpl):
    return load_assembly(assembly_dir("a", {"Cluster": tpl})).stacks[0]


def test_eks_secrets_encryption_and_public_endpoint(assembly_dir, cluster_tpl):
    tpl = cluster_tpl()
    stack = _stack(assembly_dir, tpl)
    eks = next(e for e in analysis.encryption_status(stack) if e.type == "AWS::EKS::Cluster")
    assert (
        eks.status == "Kubernetes secrets envelope-encrypted with KMS" and eks.key == "${Key.Arn}" and eks.flags == ()
    )
    exposure = [x for x in analysis.internet_exposure(stack) if x.type == "AWS::EKS::Cluster"]
    assert exposure[0].what == "public Kubernetes API endpoint from 203.0.113.0/24" and not exposure[0].flagged


def test_eks_without_encryption_and_open_endpoint_is_flagged(assembly_dir, cluster_tpl):
    tpl = cluster_tpl()
    props = tpl["Resources"]["Eks"]["Properties"]
    del props["EncryptionConfig"]
    del props["ResourcesVpcConfig"]["PublicAccessCidrs"]
    stack = _stack(assembly_dir, tpl)
    eks = next(e for e in analysis.encryption_status(stack) if e.type == "AWS::EKS::Cluster")
    assert eks.flags == ("⚠ EKS secrets without a customer-managed key",)
    exposure = next(x for x in analysis.internet_exposure(stack) if x.type == "AWS::EKS::Cluster")
    assert exposure.flagged and "0.0.0.0/0 (default)" in exposure.what


def test_hyperpod_groups_ebs_encryption(assembly_dir, cluster_tpl):
    stack = _stack(assembly_dir, cluster_tpl())
    groups = {e.resource: e for e in analysis.encryption_status(stack) if e.type == "AWS::SageMaker::Cluster"}
    assert groups["HyperPod group gpu-workers"].key == "${Key}" and groups["HyperPod group gpu-workers"].flags == ()
    assert groups["HyperPod group train-p5"].flags == ("⚠ no customer-managed key",)


def test_launch_template_ebs_without_encryption_is_flagged(assembly_dir, cluster_tpl):
    stack = _stack(assembly_dir, cluster_tpl())
    lt = next(e for e in analysis.encryption_status(stack) if e.type == "AWS::EC2::LaunchTemplate")
    assert lt.flags == ("⚠ unencrypted EBS",)


def test_hyperpod_cluster_create_only_properties_are_listed(assembly_dir, cluster_tpl):
    stack = _stack(assembly_dir, cluster_tpl())
    risks = {(r.resource, r.prop): r.value for r in analysis.replacement_risks(stack)}
    # From the CloudFormation schema of AWS::SageMaker::Cluster shipped with cfn-lint.
    assert risks[("HyperPod", "ClusterName")] == "demo-hyperpod"
    assert risks[("HyperPod", "VpcConfig")].startswith('{"SecurityGroupIds"')
    assert ("HyperPod", "Orchestrator/Eks") in risks
    assert risks[("Eks", "EncryptionConfig")].startswith("[") or risks[("Eks", "EncryptionConfig")].startswith("{")
    assert risks[("Checkpoints", "BucketName")] == "ckpt-bucket"
    # Stateless resources are not listed.
    assert not any(r == "SystemNodes" for r, _ in risks)


def test_acknowledgements_and_checkov_skips_are_read_from_the_assembly(assembly_dir, cluster_tpl):
    tpl = cluster_tpl()
    tpl["Resources"]["Checkpoints"]["Metadata"] = {
        "checkov": {"skip": [{"id": "CKV_AWS_18", "comment": "because reasons that matter"}]}
    }
    metadata = {
        "Cluster": {
            "/Cluster/Storage/Checkpoints": [
                {"type": "aws:cdk:acknowledged-rules", "data": {"Annotation::AwsSolutions-S1": "why it is fine"}}
            ],
            "/Cluster/Storage/Checkpoints/Resource": [{"type": "aws:cdk:logicalId", "data": "Checkpoints"}],
            "/Cluster/Other/Resource": [{"type": "aws:cdk:logicalId", "data": "Key"}],
        }
    }
    stack = load_assembly(assembly_dir("a", {"Cluster": tpl}, metadata=metadata)).stacks[0]
    acks = stack.acknowledgements()
    assert [(a.path, a.rule, a.reason, a.resources) for a in acks] == [
        ("/Cluster/Storage/Checkpoints", "AwsSolutions-S1", "why it is fine", ("Checkpoints",))
    ]
    assert [(s.resource, s.check, s.comment) for s in analysis.checkov_skips(stack)] == [
        ("Checkpoints", "CKV_AWS_18", "because reasons that matter")
    ]


def test_dev_report_lists_real_acknowledgements(synthesized):
    assembly, _, _ = synthesized("dev")
    acks = [a for s in load_assembly(assembly.directory).stacks for a in s.acknowledgements()]
    rules = {(a.path.split("/", 2)[-1], a.rule) for a in acks}
    assert ("Buckets/AccessLogs", "AwsSolutions-S1") in rules
    assert ("Network/FlowLogRole", "NIST.800.53.R5-IAMNoInlinePolicy") in rules
    assert all(len(a.reason) >= 25 for a in acks if a.rule.startswith(("AwsSolutions", "NIST")))
