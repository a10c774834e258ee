"""docgen/images_page.py: docs/reference/images.md is the images table generated now."""

from __future__ import annotations

from config import known_environments
from docgen import images_page
from review.assembly import load_assembly
from review.images import image_rows


def test_committed_page_is_what_the_assemblies_generate(synthesized):
    from constructs.chart_pods import chart_pods

    environments = []
    for name in known_environments():
        assembly, config, _ = synthesized(name)
        chart_pods(config)  # a missing chart or helm skips (tests/conftest.py)
        environments.append((config, image_rows(load_assembly(assembly.directory).stacks, config)))
    page = images_page.PAGE
    assert page.exists(), "docs/reference/images.md is missing: run `python -m docgen.images_page`"
    assert page.read_text() == images_page.page_text(environments), (
        "docs/reference/images.md is stale: run `python -m docgen.images_page` and commit the result"
    )


def test_every_environment_has_a_source_and_presence_for_every_image():
    text = images_page.PAGE.read_text()
    for name in known_environments():
        assert f"\n## {name}\n" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Pod |")]
    assert rows
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 5 and cells[3] and cells[4] and not cells[4].startswith("NOTHING"), row


def test_asset_tags_are_shown_as_a_placeholder():
    cell = images_page._cell(
        "1.dkr.ecr.r.amazonaws.com/cdk-hnb659fds-container-assets-111111111111-us-east-1:" + "a" * 64
    )
    assert cell.endswith("cdk-hnb659fds-container-assets-111111111111-us-east-1:<asset hash>")


def test_without_the_charts_the_page_command_says_so_in_one_line(monkeypatch, capsys):
    """No shared fixtures and no network: one line naming what is missing, exit 2, no traceback."""

    def unavailable(*_args, **_kwargs):
        raise images_page.ImagesUnavailable(
            "the Helm releases' pods cannot be rendered: missing kuberay-operator-1.7.0"
        )

    monkeypatch.setattr(images_page, "generate", unavailable)
    assert images_page.main(["--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["docgen.images_page: the Helm releases' pods cannot be rendered: missing kuberay-operator-1.7.0"]
