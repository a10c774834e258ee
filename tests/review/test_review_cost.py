"""The monthly cost estimate: a known config against a hand-computed figure."""

from __future__ import annotations

from datetime import date

import pytest

from config import load_environment, versions
from review.assembly import load_assembly
from review.cost import estimate, load_prices

# A day on which the synthetic cluster's Kubernetes 1.33 is still in standard support.
STANDARD_DAY = date(2026, 7, 28)


def test_cost_of_synthetic_cluster_matches_hand_computed_figure(assembly_dir, cluster_tpl, test_prices):
    stacks = load_assembly(assembly_dir("a", {"Cluster": cluster_tpl()})).stacks
    est = estimate(stacks, test_prices, on=STANDARD_DAY)
    # By hand, 730 h/month, prices from the test table:
    #   HyperPod 2 x ml.g5.12xlarge x $10/h          = 14,600.00
    #   HyperPod EBS 2 x 500 GB x $0.10              =    100.00
    #   HyperPod 1 x ml.p5.48xlarge x $50/h          = 36,500.00
    #   FSx 2400 GiB PERSISTENT_2 250 x $0.20        =    480.00
    #   NAT 2 x $0.05/h                              =     73.00
    #   EKS control plane $0.10/h                    =     73.00
    #   EKS nodes 2 x m7i.xlarge x $0.20/h           =    292.00
    #   EKS node EBS 2 x 100 GiB gp3 x $0.08         =     16.00
    #   Interface endpoint 2 AZ x $0.01/h            =     14.60
    #   KMS key                                      =      1.00
    assert est.total == pytest.approx(52_149.60)
    assert est.by_item() == {
        "HyperPod ml.g5.12xlarge": 14_600.0,
        "HyperPod EBS": 100.0,
        "HyperPod ml.p5.48xlarge": 36_500.0,
        "FSx for Lustre": 480.0,
        "NAT gateway": 73.0,
        "EKS control plane": 73.0,
        "EKS nodes m7i.xlarge": 292.0,
        "EKS node EBS": 16.0,
        "Interface endpoint": 14.6,
        "KMS key": 1.0,
    }
    assert est.unpriced == []


def test_control_plane_priced_by_support_status_on_the_reports_date(assembly_dir, cluster_tpl, test_prices):
    """Past the end of standard support the control plane gets a separate surcharge line: the
    extended-support price minus the standard one, for every hour of the month."""
    stacks = load_assembly(assembly_dir("a", {"Cluster": cluster_tpl()})).stacks
    version = next(r.properties["Version"] for s in stacks for r in s.resources() if r.type == "AWS::EKS::Cluster")
    assert version == "1.33"  # standard support until 2026-07-29 (config/versions.py EKS_CALENDAR)
    before = estimate(stacks, test_prices, on=date(2026, 7, 28))
    after = estimate(stacks, test_prices, on=date(2026, 7, 29))
    [cp_before] = [i for i in before.items if i.item == "EKS control plane"]
    [cp_after] = [i for i in after.items if i.item == "EKS control plane"]
    assert (cp_before.monthly, cp_before.quantity) == (73.0, "Kubernetes 1.33, standard support on 2026-07-28")
    assert (cp_after.monthly, cp_after.quantity) == (73.0, "Kubernetes 1.33, extended support on 2026-07-29")
    assert [i for i in before.items if i.item == "EKS extended support"] == []
    [surcharge] = [i for i in after.items if i.item == "EKS extended support"]
    assert (surcharge.monthly, surcharge.unit_price, surcharge.section) == (
        365.0,  # ($0.60 - $0.10) x 730
        "+$0.5/h",
        "eks_cluster_extended_hourly",
    )
    assert surcharge.quantity == "Kubernetes 1.33, past standard support since 2026-07-29 (extended until 2027-07-29)"
    assert after.total - before.total == pytest.approx(365.0)
    # Without a date: the pinned status day of config/versions.py, never the clock.
    assert estimate(stacks, test_prices).items == estimate(stacks, test_prices, on=versions.SUPPORT_STATUS_AS_OF).items


def test_instance_type_without_price_is_named_not_guessed(assembly_dir, cluster_tpl, test_prices):
    tpl = cluster_tpl()
    tpl["Resources"]["HyperPod"]["Properties"]["InstanceGroups"][1]["InstanceType"] = "ml.trn2.48xlarge"
    est = estimate(load_assembly(assembly_dir("a", {"Cluster": tpl})).stacks, test_prices, on=STANDARD_DAY)
    assert [i.item for i in est.unpriced] == ["HyperPod ml.trn2.48xlarge"]
    assert est.total == pytest.approx(52_149.60 - 36_500.0)


def test_cost_of_dev_uses_the_repo_price_table(synthesized):
    """dev.yaml: one NAT gateway (non-production), FSx 1200 GiB at 125 MB/s/TiB, two KMS keys
    (platform key and flow-log key); no EKS/HyperPod stacks on main yet."""
    assembly, config, _ = synthesized("dev")
    prices = load_prices()
    est = estimate(load_assembly(assembly.directory).stacks, prices)
    fsx = prices.data["fsx_lustre_gb_month"]["prices"]["PERSISTENT_2"][125]
    nat = prices.data["nat_gateway_hourly"]["price"]
    kms = prices.data["kms_key_month"]["price"]
    expected_without_cluster = 1200 * fsx + 1 * 730 * nat + 2 * kms
    assert config.fsx.storage_capacity_gib == 1200 and config.network.nat_gateway_count(production=False) == 1
    cluster_items = ("HyperPod", "EKS")
    base = sum(v for k, v in est.by_item().items() if not k.startswith(cluster_items))
    assert base == pytest.approx(expected_without_cluster)
    assert est.by_item()["FSx for Lustre"] == pytest.approx(174.0)  # 1200 GiB x $0.145


def test_price_table_names_its_sources_and_date():
    prices = load_prices()
    assert prices.data["recorded"] and prices.data["region"] == "us-east-1"
    for section, node in prices.data.items():
        if isinstance(node, dict):
            assert str(node.get("source", "")).startswith("https://aws.amazon.com/"), section


def test_unverified_prices_are_marked_in_the_report(assembly_dir, cluster_tpl, tmp_path):
    from review.__main__ import main

    d = assembly_dir("a", {"Cluster": cluster_tpl()})
    assert main([str(d), "--out", str(tmp_path), "--no-diagram"]) == 0
    md = (tmp_path / "test.md").read_text()
    hyperpod_rows = [line for line in md.splitlines() if line.startswith("| HyperPod ml.")]
    assert hyperpod_rows and all("⚠ unverified price" in r for r in hyperpod_rows)
    nat_rows = [line for line in md.splitlines() if line.startswith("| NAT gateway")]
    assert nat_rows and not any("unverified" in r for r in nat_rows)


# --- cost per million tokens -----------------------------------------------------------------


def test_training_token_cost_of_prod_is_the_hand_computed_figure():
    """prod: ml.p5.48xlarge at $55.04/h over 8 H100s = $6.88 per GPU-hour; llama-7b trains
    45,098,729,472 FLOPs per token; 36.5 % of 989.5 TFLOP/s is 8,008.37 tokens/s per GPU (the
    GPU bench measured 8,005 on one H200); at 90 % goodput a million tokens take 138.74
    GPU-seconds: $0.26515."""
    from review.token_cost import TRAINING_GOODPUT, TRAINING_MFU, training_token_cost

    config = load_environment("prod")
    from sizing.training import flops_per_token

    assert flops_per_token(config.training.model) == 45_098_729_472.0
    c = training_token_cost(config, load_prices())
    assert (c.workload, c.instance_type, c.chip, c.gpus, c.gpu_hour) == ("training", "ml.p5.48xlarge", "H100", 32, 6.88)
    assert (TRAINING_MFU, TRAINING_GOODPUT, c.goodput) == (0.365, 0.90, 0.90)
    assert c.tokens_per_s_per_gpu == pytest.approx(8008.374165490282, rel=1e-12)
    assert c.per_million == pytest.approx(0.26515454276273265, rel=1e-12)
    assert c.basis == (
        "36.5% MFU (assumed) of the H100's 989.5 TFLOP/s dense bf16 peak, 45.1 GFLOP per token (preset llama-7b)"
    )
    # Half the goodput, twice the cost.
    assert training_token_cost(config, load_prices(), goodput=0.45).per_million == pytest.approx(2 * c.per_million)


def test_training_token_cost_of_staging_and_dev():
    """staging: ml.g6e.12xlarge $13.12/h over 4 L40S = $3.28; the default model, 509,718,528 FLOPs
    per token; 36.5 % of 362.05 TFLOP/s. dev: the A10G has no datasheet peak in the catalog, so the
    row is not priced and says why."""
    from review.token_cost import training_token_cost

    c = training_token_cost(load_environment("staging"), load_prices())
    assert (c.chip, c.gpus, c.gpu_hour) == ("L40S", 2, 3.28)
    assert c.tokens_per_s_per_gpu == pytest.approx(259257.3013159137, rel=1e-12)
    assert c.per_million == pytest.approx(0.0039047913940088753, rel=1e-12)
    d = training_token_cost(load_environment("dev"), load_prices())
    assert (d.chip, d.gpu_hour, d.per_million, d.tokens_per_s_per_gpu) == ("A10G", 1.7725, None, None)
    assert d.basis == "no dense bf16 peak for A10G in config/catalog.py: not priced"


def test_serving_token_cost_is_not_priced_without_a_measured_throughput():
    from review.token_cost import serving_token_cost

    c = serving_token_cost(load_environment("prod"), load_prices())
    assert (c.workload, c.instance_type, c.chip, c.gpus, c.gpu_hour) == ("serving", "ml.g6e.12xlarge", "L40S", 8, 3.28)
    assert (c.per_million, c.basis) == (None, "no measured generation throughput on L40S: not priced")


@pytest.mark.parametrize("shape", [{"preset": "tiny"}, {"preset": "llama-7b"}, {"arch": "gpt"}, {}])
def test_the_plans_flops_per_token_is_the_models(shape):
    """The review's FLOPs per token (sizing, no torch) and the model's (workloads, MFU) agree."""
    from config.training import ModelSize
    from sizing.training import flops_per_token as planned
    from workloads.common.model import config_from_dict, flops_per_token

    m = ModelSize.model_validate(shape)
    assert planned(m) == flops_per_token(config_from_dict(m.architecture()))


def test_report_prints_the_token_costs_with_their_assumptions():
    from review.document import Document
    from review.report import _token_costs

    doc = Document("t")
    _token_costs(doc, load_environment("prod"), load_prices())
    text = doc.markdown()
    assert "### Cost per million tokens" in text
    assert "an assumed 36.5% model FLOPs utilization" in text and "an assumed 90% goodput" in text
    assert "| training | ml.p5.48xlarge (H100) | 32 | $6.88 | 8,008 |" in text
    assert "| 90% (assumed) | $0.2652 |" in text
    assert "| serving | ml.g6e.12xlarge (L40S) | 8 | $3.28 | n/a |" in text
