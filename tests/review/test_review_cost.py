"""The monthly cost estimate: a known config against a hand-computed figure."""

from __future__ import annotations

from datetime import date

import pytest

from config import versions
from config.prices import load_prices
from review.assembly import load_assembly
from review.cost import estimate

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
