"""The training job on token shards (training.dataset_path), on the local Ray cluster of
test_train_ray.py: the same exact-resume checks as the byte corpus's (the same world size after
a node loss: bitwise; 4 -> 2 and 2 -> 4 workers: position and schedule carried over, loss within
the tolerance), on a dataset pretokenized here (the pretokenize pipeline's local mode, a BPE
tokenizer trained on the spot), with evaluation on: the validation loss is in the metrics and
each checkpoint's metadata, and the same after the resume as uninterrupted."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import threading
import time

import pytest
import ray.cloudpickle

from rigs.bpe import stdlib_texts, train_bpe
from tests.workloads.training.test_train_ray import (
    BATCH,
    COMMON,
    EVERY,
    RESHARD_LOSS_TOLERANCE,
    STEPS,
    LossLog,
    _assert_same_training_state,
    _final,
    _losses,
)
from workloads.common import checkpoint as ck
from workloads.training import settings as S
from workloads.training.data import DataPosition
from workloads.training.job import run

pytestmark = [pytest.mark.slow, pytest.mark.ray_cluster]
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def _fast_controller_poll():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
        yield


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """A pretokenized dataset of 80 stdlib modules (BPE of 1000 ids) and the training settings
    that read it."""
    from workloads.pretokenize.pipeline import PretokenizeConfig
    from workloads.pretokenize.pipeline import run as pretokenize

    root = tmp_path_factory.mktemp("tokens")
    (root / "raw").mkdir()
    texts = stdlib_texts(80, start=30)
    for part in range(2):
        lines = [json.dumps({"text": t}) for t in texts[part * 40 : (part + 1) * 40]]
        (root / "raw" / f"part{part}.jsonl").write_text("\n".join(lines) + "\n")
    tok = train_bpe(root / "tokenizer.json", vocab_size=1000)
    manifest = pretokenize(
        PretokenizeConfig(
            input=str(root / "raw"),
            output=str(root / "ds"),
            tokenizer=str(tok),
            validation_fraction=0.15,
            shard_tokens=64 * 300 + 1,
        ),
        local=True,
        log=lambda _: None,
    )
    assert manifest.tokenizer.vocab_size == 1000 and "split_bytes" in manifest.extra
    return {
        "dataset_path": str(root / "ds"),
        "tokenizer": str(tok),
        "model": {"preset": "tiny", "vocab_size": 1024},
        "eval_every_steps": EVERY,
        "eval_batches": 2,
    }


def _settings(storage_path, run_name, tokens, **extra):
    return S.for_local({**COMMON, **tokens, "run_name": run_name, **extra}, storage_path=str(storage_path))


def _reference(tmp_path_factory, tokens, workers):
    storage = tmp_path_factory.mktemp(f"tref{workers}")
    log = storage / "losses"
    result = run(_settings(storage, "ref", tokens, num_workers=workers), step_callback=LossLog(log))
    assert result.error is None, result.error
    return storage, result, _losses(log)


@pytest.fixture(scope="module")
def tref2(ray_cluster, tmp_path_factory, tokens):
    return _reference(tmp_path_factory, tokens, 2)


@pytest.fixture(scope="module")
def tref4(ray_cluster, tmp_path_factory, tokens):
    return _reference(tmp_path_factory, tokens, 4)


def test_tokens_train_and_evaluate(tref2):
    storage, result, losses = tref2
    assert result.metrics["step"] == STEPS
    assert losses[STEPS] < losses[1] - 1.0
    m = result.metrics
    assert m["val_step"] == STEPS and m["val_perplexity"] == pytest.approx(math.exp(m["val_loss"]))
    assert 0 < m["val_bits_per_byte"] < m["val_loss"] and m["grad_norm"] > 0
    meta = _final(storage, "ref").meta
    assert meta["evaluation"]["val_loss"] == m["val_loss"] and meta["grad_norm"] == m["grad_norm"]
    assert meta["model_config"]["vocab_size"] == 1024


def test_exact_resume_after_node_loss_on_tokens(ray_cluster, tref2, tokens, tmp_path_factory):
    """As test_train_ray's: SIGKILL a worker node after the first checkpoint; bitwise the same
    weights, optimizer state and data position, and the same validation loss."""
    storage_path = str(tmp_path_factory.mktemp("tnodeloss"))
    box = {}
    t = threading.Thread(
        target=lambda: box.setdefault("result", run(_settings(storage_path, "ref", tokens))), daemon=True
    )
    t.start()
    first = f"{storage_path}/ref/{ck.dir_name(EVERY)}/{ck.MANIFEST}"
    deadline = time.monotonic() + 240
    while not os.path.exists(first) and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.1)
    assert os.path.exists(first), "no checkpoint was written"
    # The last worker node still alive: an earlier module's node-loss test killed node 2 of the
    # session's cluster and added another, so a fixed index may name a node already gone.
    ray_cluster.kill_node(max(i for i, n in enumerate(ray_cluster.nodes) if i > 0 and n.proc.poll() is None))
    try:
        t.join(timeout=300)
        assert not t.is_alive(), "the run did not finish after the node loss"
    finally:
        ray_cluster.add_worker(wait=False)
    result = box["result"]
    assert result.error is None and result.metrics["resumed_from"] >= EVERY
    _assert_same_training_state(_final(storage_path, "ref"), _final(tref2[0], "ref"))
    assert result.metrics["val_loss"] == tref2[1].metrics["val_loss"]  # bitwise
    ray_cluster._wait_nodes(ray_cluster.alive_count_expected(), 120)


def _expected_position(tokens, before: int, after: int, at: int) -> dict:
    from workloads.common.token_windows import TokenWindows

    data = TokenWindows(tokens["dataset_path"], block_size=64, seed=1234)
    pos = DataPosition()
    for step in range(STEPS):
        data.next_batch(pos, rank=0, world_size=before if step < at else after, batch_size=BATCH)
    return pos.to_dict()


@pytest.mark.parametrize(("before", "after"), [(4, 2), (2, 4)])
def test_resume_on_another_world_size_on_tokens(before, after, request, tmp_path, tokens):
    storage, ref_result, _ = request.getfixturevalue(f"tref{before}")
    (tmp_path / "ref").mkdir()
    shutil.copytree(storage / "ref" / ck.dir_name(20), tmp_path / "ref" / ck.dir_name(20))
    log = tmp_path / "losses"
    result = run(_settings(tmp_path, "ref", tokens, num_workers=after), step_callback=LossLog(log))
    assert result.error is None and result.metrics["resumed_from"] == 20
    assert result.metrics["lr"] == ref_result.metrics["lr"]
    final = _final(tmp_path, "ref")
    assert final.meta["world_size"] == after
    assert final.meta["data_position"] == _expected_position(tokens, before, after, 20)
    assert sorted(_losses(log)) == list(range(21, STEPS + 1))
    # The same held-out windows whatever the world size: the validation losses compare.
    mine, theirs = result.metrics["val_loss"], ref_result.metrics["val_loss"]
    print(f"resume {before}->{after} on tokens: validation loss {mine:.4f} vs {theirs:.4f} uninterrupted")
    assert abs(mine - theirs) <= RESHARD_LOSS_TOLERANCE * theirs


def test_a_dataset_of_another_tokenizer_is_refused_before_start(tmp_path, tokens):
    from config import ConfigError

    s = _settings(tmp_path, "x", {**tokens, "tokenizer": "bytes"})
    with pytest.raises(ConfigError, match=r"was tokenized with tokenizer .* not the configured tokenizer"):
        run(s)
