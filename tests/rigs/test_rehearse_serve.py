"""The serving rehearsals' choice of checkpoint (rigs/rehearse_serve.py ``locate``): a run
without a checkpoint is a one-line error before any Ray process starts."""

from __future__ import annotations

import pytest

from rigs import rehearse_serve as rehearse
from rigs import rehearse_serve_ha as rehearse_ha


@pytest.fixture
def storage(tmp_path):
    rehearse_ha.tiny_checkpoint(tmp_path, "tiny-run")
    return tmp_path


def test_a_named_run_is_served_only_if_it_has_a_checkpoint(storage):
    assert rehearse.locate(str(storage), "tiny-run") == (storage, "tiny-run")
    assert rehearse.locate(str(storage), None) == (storage, "tiny-run")
    assert rehearse.locate(str(storage), "other-run") == (storage, None)
    assert rehearse.locate(str(storage / "missing"), None) == (storage / "missing", None)


@pytest.mark.parametrize("module", [rehearse, rehearse_ha])
def test_an_unknown_run_is_one_clear_error(module, storage, capsys):
    assert module.main(["--storage", str(storage), "--run", "BAD NAME"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"no checkpoint of run 'BAD NAME' under {storage}")
    assert "Traceback" not in err
