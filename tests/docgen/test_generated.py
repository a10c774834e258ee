"""docgen/generated.py: the write-or-check tail every generated page and schema shares."""

from __future__ import annotations

from docgen.generated import write_or_check


def test_writes_every_file_and_names_it(tmp_path, capsys):
    files = {tmp_path / "a.md": "a\n", tmp_path / "deep" / "b.json": "{}\n"}
    assert write_or_check(files, root=tmp_path, check=False, hint="; run x") == 0
    assert [p.read_text() for p in files] == ["a\n", "{}\n"]
    out = capsys.readouterr()
    assert out.out.splitlines() == ["wrote a.md", "wrote deep/b.json"] and out.err == ""


def test_check_names_each_stale_or_missing_file_and_writes_nothing(tmp_path, capsys):
    fresh, stale, missing = tmp_path / "fresh.md", tmp_path / "stale.md", tmp_path / "missing.md"
    fresh.write_text("same\n")
    stale.write_text("old\n")
    files = {fresh: "same\n", stale: "new\n", missing: "new\n"}
    assert write_or_check(files, root=tmp_path, check=True, hint=" (run: make it)") == 1
    out = capsys.readouterr()
    assert out.err.splitlines() == ["stale: stale.md (run: make it)", "stale: missing.md (run: make it)"]
    assert out.out == "" and stale.read_text() == "old\n" and not missing.exists()
    assert write_or_check({fresh: "same\n"}, root=tmp_path, check=True, hint="") == 0
    assert capsys.readouterr().err == ""
