"""The architecture diagram: generated from the templates, PNG and SVG via graphviz."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from config.facts.names import GCS_STORE_PORT
from manifests import registry
from review.assembly import load_assembly
from review.diagram import WRAP, render_diagram, to_dot
from review.flows import check_flows
from sizing.pods import RAY_HEAD

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
    # Helm release and node group on the cluster: a light edge without a label (the EKS box says it).
    assert "n_Cluster_KubeRay -> n_Cluster_Eks [color=" in dot
    assert 'n_Cluster_HyperPod -> n_Cluster_Eks [label="orchestrated by", ' in dot
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
    # The shared group is drawn attached to what it guards (a dotted edge without a label).
    assert "-> n_HprayDevNetwork_NetworkSharedSecurityGroup90AC47FC [color=" in dot


def test_readme_diagram_is_current(synthesized):
    """docs/architecture-dev.* is what the README shows: regenerate with `make docs` when the
    templates change."""
    assembly, config, _ = synthesized("dev")
    a = load_assembly(assembly.directory)
    committed = (ROOT / "docs" / "architecture-dev.dot").read_text()
    flows = check_flows(a.stacks, config)
    assert to_dot(a.stacks, env="dev", exports=a.exports(), config=config, flows=flows) == committed, (
        "stale docs/architecture-dev.*: run `make docs`"
    )
    assert (ROOT / "docs" / "architecture-dev.png").stat().st_size > 0
    assert (ROOT / "docs" / "architecture-dev.svg").stat().st_size > 0
    assert "docs/architecture-dev.png" in (ROOT / "README.md").read_text()


# --- What runs where: dev and prod ------------------------------------------------------------


def _parse(dot: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(node id -> label with its wrapping undone, node id -> the clusters it is drawn in)."""
    nodes, inside, stack = {}, {}, []
    for line in dot.splitlines():
        text = line.strip()
        if text.startswith("subgraph "):
            stack.append(text.split()[1])
        elif text == "}" and stack:
            stack.pop()
        elif m := re.match(r'^(\w+) \[label="((?:[^"\\]|\\.)*)"', text):
            nodes[m.group(1)] = m.group(2)
            inside[m.group(1)] = list(stack)
    return nodes, inside


def _flat(text: str) -> str:
    """A label without its line breaks and spaces, so wrapped text compares with unwrapped."""
    return re.sub(r"\\n|\s", "", text)


@pytest.fixture(scope="module", params=["dev", "prod"])
def drawn(request, synthesized):
    assembly, config, _ = synthesized(request.param)
    a = load_assembly(assembly.directory)
    flows = check_flows(a.stacks, config)
    dot = to_dot(a.stacks, env=request.param, exports=a.exports(), config=config, flows=flows)
    return a, config, dot


def test_every_ray_head_and_worker_group_of_the_plan_is_on_its_node_pool(drawn):
    _, config, dot = drawn
    nodes, inside = _parse(dot)
    plan = registry.plan_of(config)
    workloads = [w for w in (plan.training, plan.serve, plan.llm) if w is not None]
    assert workloads
    for w in workloads:
        shape = w.worker
        count = (
            str(shape.max_replicas)
            if shape.min_replicas == shape.max_replicas
            else (f"{shape.min_replicas}–{shape.max_replicas}")
        )
        workers = [n for n, label in nodes.items() if label.startswith("Ray workers") and _flat(w.name) in _flat(label)]
        assert len(workers) == 1, (w.name, workers)
        label = _flat(nodes[workers[0]])
        assert _flat(f"{count} {'pod' if count == '1' else 'pods'} on {shape.instance_type}") in label, label
        assert _flat(f"{shape.cpus} CPU, {shape.memory_gib} GiB") in label, label
        if shape.gpus:
            assert _flat(f"each {shape.gpus} GPU") in label, label
        # Drawn inside the node pool of its instance group, beside that group's node.
        pool = next(c for c in inside[workers[0]] if c.startswith("cluster_pool_"))
        anchor = pool.removeprefix("cluster_pool_")
        assert _flat(f"Instance group {w.group.name}") in _flat(nodes[anchor])
        assert _flat(f"{w.group.instance_count} × {w.group.instance_type}") in _flat(nodes[anchor])
        heads = [n for n, label in nodes.items() if label.startswith("Ray head") and _flat(w.name) in _flat(label)]
        assert len(heads) == 1, (w.name, heads)
        head_pool = next(c for c in inside[heads[0]] if c.startswith("cluster_pool_"))
        system = (
            f"EKS node group system{config.eks.system_nodes.desired_size} × {config.eks.system_nodes.instance_type}"
        )
        assert _flat(system) in _flat(nodes[head_pool.removeprefix("cluster_pool_")])
        head = w.head.resources if w is plan.training else RAY_HEAD  # the training head grows with its cluster
        assert _flat(f"{head['cpu']} CPU, {head['memory'].removesuffix('Gi')} GiB") in _flat(nodes[heads[0]])


# Each stateful or networked resource type of the templates, and the text its node starts with.
DRAWN_TYPES = {
    "AWS::ElastiCache::ReplicationGroup": "GCS store",
    "AWS::APS::Workspace": "AMP workspace",
    "AWS::APS::Scraper": "AMP managed collector",
    "AWS::SecretsManager::Secret": "Secrets Manager secret",
    "AWS::SNS::Topic": "SNS topic",
    "AWS::ECR::PullThroughCacheRule": "ECR pull-through cache",
    "AWS::S3::Bucket": "S3 bucket",
    "AWS::FSx::FileSystem": "FSx for",
    "AWS::KMS::Key": "KMS key",
    "AWS::EKS::Cluster": "EKS control plane",
    "AWS::EKS::Nodegroup": "EKS node group",
    "AWS::SageMaker::Cluster": "HyperPod cluster",
    "AWS::EC2::SecurityGroup": "Security group",
    "AWS::EC2::NatGateway": "NAT gateway",
}


def test_every_stateful_and_networked_resource_has_a_node(drawn):
    a, config, dot = drawn
    nodes, _ = _parse(dot)
    for type_, prefix in DRAWN_TYPES.items():
        in_templates = sum(1 for s in a.stacks for r in s.resources() if r.type == type_)
        # The cluster security group EKS creates is drawn too, though no template has it.
        extra = 1 if type_ == "AWS::EC2::SecurityGroup" else 0
        assert sum(1 for label in nodes.values() if label.startswith(prefix)) == in_templates + extra, type_
    for type_ in ("AWS::ElastiCache::ReplicationGroup", "AWS::APS::Workspace", "AWS::SNS::Topic"):
        assert any(r.type == type_ for s in a.stacks for r in s.resources()), type_
    instance_groups = [label for label in nodes.values() if label.startswith("Instance group")]
    assert len(instance_groups) == len(config.hyperpod.instance_groups)
    # The images the stacks build go to the CDK asset repository, drawn with their names.
    images = {str(i.get("displayName")) for s in a.stacks for i in s.docker_images.values()}
    repos = [label for label in nodes.values() if label.startswith("ECR repository")]
    assert images and repos and all(_flat(i) in _flat("".join(repos)) for i in images)
    if config.network.images_from_ecr:
        assert any(label.startswith("ECR pull-through cache") for label in nodes.values())


def test_every_security_group_is_attached_to_what_it_guards(drawn):
    _, _, dot = drawn
    nodes, _ = _parse(dot)
    groups = [n for n, label in nodes.items() if label.startswith("Security group")]
    guarded = {m.group(2) for m in re.finditer(r"^\s*(\w+) -> (\w+) \[.*style=dotted, dir=none", dot, re.M)}
    assert groups and set(groups) <= guarded, set(groups) - guarded
    heads = [n for n, label in nodes.items() if label.startswith("Ray head")]
    head_group = next(n for n in groups if "Ray head pods" in nodes[n])
    for h in heads:
        assert f"{h} -> {head_group} [" in dot


def _edge(dot: str, a: str, b: str) -> str | None:
    for line in dot.splitlines():
        if line.strip().startswith(f"{a} -> {b} ["):
            return line
    for line in dot.splitlines():  # drawn once, both ways
        if line.strip().startswith(f"{b} -> {a} [") and "dir=both" in line:
            return line
    return None


def test_network_flows_of_the_flow_table_are_proven_edges(drawn):
    _, config, dot = drawn
    nodes, _ = _parse(dot)

    def named(prefix: str) -> list[str]:
        return [n for n, label in nodes.items() if label.startswith(prefix)]

    gcs = named("GCS store")
    assert gcs and config.gcs_fault_tolerance
    service_heads = [n for n in named("Ray head") if "RayService" in nodes[n]]
    assert service_heads
    for h in service_heads + [n for n in named("Ray head") if "RayJob" in nodes[n]]:
        line = _edge(dot, h, gcs[0])
        assert line is not None and f"tcp {GCS_STORE_PORT}" in line and "#1f4e9c" in line, (h, line)
    fsx = named("FSx for")[0]
    for w in named("Ray workers"):
        line = _edge(dot, w, fsx)
        assert line is not None and "tcp 988, 1018-1023" in line, line
    scraper = named("AMP managed collector")[0]
    eks = named("EKS control plane")[0]
    assert "tcp 443" in (_edge(dot, scraper, eks) or "")
    # The review proved every flow: no edge is drawn as unproven.
    assert "#c00000" not in dot.split("legend [")[0]


def test_a_flow_the_review_could_not_prove_is_drawn_as_such(synthesized):
    assembly, config, _ = synthesized("dev")
    a = load_assembly(assembly.directory)
    flows = [
        replace(f, ok=False, detail="no ingress rule") if f.name == "head->gcs-store" else f
        for f in check_flows(a.stacks, config)
    ]
    dot = to_dot(a.stacks, env="dev", exports=a.exports(), config=config, flows=flows)
    nodes, _ = _parse(dot)
    gcs = next(n for n, label in nodes.items() if label.startswith("GCS store"))
    lines = [line for line in dot.splitlines() if f"-> {gcs} [" in line and "tcp 6380" in line]
    assert lines and all("style=dashed" in line and "#c00000" in line for line in lines)
    assert "network flow NOT proven" in dot


def test_labels_wrap_and_none_is_cut(drawn):
    _, _, dot = drawn
    nodes, _ = _parse(dot)
    assert "…" not in dot and "..." not in dot
    for nid, label in nodes.items():
        assert all(len(line) <= WRAP for line in label.split("\\n")), (nid, label)
    # The long security group descriptions are there in full.
    assert any("FSx for Lustre" in _flat(label) or "FSxforLustre" in _flat(label) for label in nodes.values())


def test_legend_names_every_kind_and_edge_style_drawn(drawn):
    _, _, dot = drawn
    legend = dot[dot.index("legend [") :]
    for text in ("Legend", "Ray head pod (plan)", "Ray worker group (plan)", "Security group", "data flow"):
        assert text in legend, text
    assert "network flow (flow table), proven" in legend


def test_data_flows_checkpoints_secrets_and_image_pulls(drawn):
    _, config, dot = drawn
    nodes, _ = _parse(dot)
    plan = registry.plan_of(config)
    assert plan.training is not None
    path = plan.training.settings.storage_path
    workers = next(n for n, label in nodes.items() if label.startswith("Ray workers") and "RayJob" in label)
    store = "FSx for" if path.startswith("/fsx") else "S3 bucket"
    target = next(n for n, label in nodes.items() if label.startswith(store))
    line = next(x for x in dot.splitlines() if x.strip().startswith(f'{workers} -> {target} [label="checkpoints'))
    assert _flat(path) in _flat(line) and "#2e7d32" in line
    token = next(n for n, label in nodes.items() if _flat(f"{config.name_prefix}/ray-auth-token") in _flat(label))
    for head in (n for n, label in nodes.items() if label.startswith("Ray head")):
        assert f"{token} -> {head} [" in dot
    # Images go from the ECR box to every node pool.
    pools = {m.group(1) for m in re.finditer(r"subgraph cluster_pool_(\w+)", dot)}
    pulled = set(re.findall(r'ltail=cluster_ecr, lhead=cluster_pool_(\w+), label="image pulls"', dot))
    assert pools and pulled == pools
