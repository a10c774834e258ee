"""`python -m review`'s line for stacks that no environment file describes (the delivery
pipeline's own stack in `make pipeline`): a note on stdout that says what it means."""

from __future__ import annotations

from types import SimpleNamespace

from review.__main__ import config_for


def test_stacks_of_no_environment_get_a_note_not_an_error(capsys):
    stacks = [SimpleNamespace(account="444444444444", region="us-east-1")]
    assert config_for("PlatformPipeline", stacks) is None
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        "review: PlatformPipeline: report without the flow checks: no config/NAME.yaml describes these stacks "
        "(account 444444444444 in us-east-1), and flows are checked per environment (each environment's own "
        "report has them)\n"
    )


def test_a_report_without_its_images_section_says_so_on_the_last_line(capsys):
    """An empty chart cache: the review exits as before (0 outside images_from_ecr environments),
    and its LAST line says which report left the images section out (issue 37)."""
    from review.__main__ import finish

    assert finish([], [], [], ["review: dev: the images section is left out of the report: no chart"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[-1].startswith("review: dev: the images section is left out of the report: no chart")
    assert "INCOMPLETE" in out.splitlines()[-1]
    assert finish(["flow broken"], [], [], []) == 4
    out, err = capsys.readouterr()
    assert (out, err) == ("", "flow broken\n")
