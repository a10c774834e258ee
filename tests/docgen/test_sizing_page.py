"""docgen/sizing_page.py: docs/reference/sizing.md is the sizing table generated now."""

from __future__ import annotations

from config import known_environments, load_environment
from docgen import sizing_page as page
from manifests import registry
from sizing import storage


def test_the_committed_page_is_current():
    assert page.PAGE.exists(), "docs/reference/sizing.md is missing: run `python -m docgen.sizing_page`"
    assert page.PAGE.read_text() == page.generate(), (
        "docs/reference/sizing.md is stale: run `python -m docgen.sizing_page` and commit the result"
    )


def test_the_page_has_a_row_per_environment_and_prods_sweep():
    text = page.generate()
    for name in known_environments():
        row = storage.table_row(name, registry.plan_of(load_environment(name)).checkpoint)
        assert "| " + " | ".join(row) + " |" in text
    assert "## prod: goodput against the checkpoint interval" in text
    assert "| 1000 steps (configured) | 36.5 min | 98.12% |" in text
    assert "| 9891 steps (optimum) | 6.0 h | 99.61% |" in text


def test_check_mode_reports_a_stale_page(monkeypatch, tmp_path, capsys):
    stale = tmp_path / "sizing.md"
    stale.write_text("old")
    monkeypatch.setattr(page, "PAGE", stale)
    monkeypatch.setattr(page, "ROOT", tmp_path)
    assert page.main(["--check"]) == 1
    assert "stale: sizing.md; run `python -m docgen.sizing_page`" in capsys.readouterr().err
    assert page.main([]) == 0
    assert page.main(["--check"]) == 0
