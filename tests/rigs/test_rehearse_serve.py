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


def test_an_export_that_does_not_verify_is_one_clear_error(tmp_path, capsys):
    folder = tmp_path / "export"
    folder.mkdir()
    assert rehearse.main(["--export", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"--export {folder}: ") and "Traceback" not in err


def test_the_local_replicas_serve_the_export_given():
    from config import load_environment
    from manifests import serve_config

    env = load_environment("dev")
    cfg = serve_config.local_deploy_config(
        env, port=8000, storage="/x", run_name="r", replicas=1, export_path="/fsx/checkpoints/r/export"
    )
    assert cfg["applications"][0]["args"]["export_path"] == "/fsx/checkpoints/r/export"
    plain = serve_config.local_deploy_config(env, port=8000, storage="/x", run_name="r", replicas=1)
    assert "export_path" not in plain["applications"][0]["args"]


def test_serve_export_points_the_generation_service_at_the_runs_export():
    from config import load_environment
    from manifests import serve_config

    env = load_environment("prod")
    assert "export_path" not in serve_config.app_args(env)
    data = env.model_dump()
    data["inference"]["serve_export"] = True
    on = type(env).model_validate(data)
    assert serve_config.app_args(on)["export_path"] == "/fsx/checkpoints/models/llama-7b-fineweb"
    assert serve_config.app_args(on)["export_path"] == on.training.resolved_export_path(on.fsx.file_system_path)
