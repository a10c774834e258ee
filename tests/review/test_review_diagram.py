"""The architecture diagram: generated from the templates, PNG and SVG via graphviz."""

from __future__ import annotations

from pathlib import Path

from review.assembly import load_assembly
from review.diagram import render_diagram, to_dot

ROOT = Path(__file__).resolve().parents[2]


def test_diagram_shows_vpc_eks_hyperpod_groups_fsx_s3_helm(assembly_dir, cluster_tpl, tmp_path):
    a = load_assembly(assembly_dir("a", {"Cluster": cluster_tpl()}))
    dot = to_dot(a.stacks, env="test", exports=a.exports())
    for text in (
        "VPC 10.0.0.0/16",
        "Subnet HyperPodSubnet",
        "EKS control plane\\ndemo-eks (Kubernetes 1.33)",
        "EKS node group system\\n2 × m7i.xlarge",
        "Helm release kuberay-operator\\nkuberay-operator 1.7.0",
        "HyperPod cluster\\ndemo-hyperpod",
        "Instance group gpu-workers\\n2 × ml.g5.12xlarge",
        "Instance group train-p5\\n1 × ml.p5.48xlarge",
        "FSx for LUSTRE",
        "2400 GiB",
        "S3 bucket\\nckpt-bucket",
        "1 interface endpoints\\nsts",
    ):
        assert text in dot, text
    assert '-> n_Cluster_Eks [label="runs on"]' in dot  # Helm release and node group on the cluster
    assert 'n_Cluster_HyperPod -> n_Cluster_Eks [label="orchestrated by"]' in dot
    # The Helm release and the node group are drawn inside the EKS box with the control plane.
    eks_box = dot[dot.index("subgraph cluster_eks_") :]
    eks_box = eks_box[: eks_box.index("    }")]
    assert "n_Cluster_KubeRay" in eks_box and "n_Cluster_SystemNodes" in eks_box and "n_Cluster_Eks " in eks_box
    files = render_diagram(a.stacks, env="test", exports=a.exports(), out_dir=tmp_path)
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in files["svg"].read_bytes()[:500]


def test_cross_stack_references_become_edges(synthesized):
    assembly, _, _ = synthesized("dev")
    a = load_assembly(assembly.directory)
    dot = to_dot(a.stacks, env="dev", exports=a.exports())
    # FSx (storage stack) sits in the HyperPod subnet of the network stack via Fn::ImportValue.
    hp_subnet = next(line for line in dot.splitlines() if "Subnet HyperPodSubnetUse1az4" in line)
    assert hp_subnet.strip().startswith("n_HprayDevNetwork_")
    assert '-> n_HprayDevNetwork_NetworkSharedSecurityGroup90AC47FC [label="SG"]' in dot


def test_readme_diagram_is_current(synthesized):
    """docs/architecture-dev.* is what the README shows: regenerate with `make docs` when the
    templates change."""
    assembly, _, _ = synthesized("dev")
    a = load_assembly(assembly.directory)
    committed = (ROOT / "docs" / "architecture-dev.dot").read_text()
    assert to_dot(a.stacks, env="dev", exports=a.exports()) == committed, (
        "stale docs/architecture-dev.*: run `make docs`"
    )
    assert (ROOT / "docs" / "architecture-dev.png").stat().st_size > 0
    assert (ROOT / "docs" / "architecture-dev.svg").stat().st_size > 0
    assert "docs/architecture-dev.png" in (ROOT / "README.md").read_text()
