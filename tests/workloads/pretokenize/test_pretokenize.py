"""workloads/pretokenize end to end on a local Ray (2 CPUs) with a BPE tokenizer trained here:
the shards hold every document followed by EOS; the held-out split is deterministic; a run that
fails midway resumes without rewriting finished work; the output reads with TokenWindows; bad
inputs are one message."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rigs.bpe import stdlib_texts, train_bpe
from workloads.common import token_shards
from workloads.common.token_windows import TokenWindows
from workloads.common.tokenizer import load_tokenizer
from workloads.pretokenize import __main__ as cli
from workloads.pretokenize.inputs import list_inputs, plan_units
from workloads.pretokenize.pipeline import (
    PARTS,
    PretokenizeConfig,
    PretokenizeError,
    dataset_digest,
    is_validation,
    run,
    settings_digest,
)

pytestmark = pytest.mark.ray_cluster


@pytest.fixture(scope="module")
def ray_local(s3_server):
    """Ray with 2 CPUs, started after the local S3 server so its workers see the endpoint."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory):
    return train_bpe(tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=1200)


DOCS = stdlib_texts(48, start=30)


def write_jsonl(directory, docs, files=4):
    directory.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(docs)), files)):
        with open(directory / f"part-{i}.jsonl", "w") as f:
            for j in part:
                f.write(json.dumps({"text": docs[j], "id": int(j)}) + "\n")
    return directory


def decode_split(manifest, tok, split):
    ids = np.concatenate(
        [np.fromfile(manifest.directory / s.name, dtype=manifest.dtype) for s in manifest.shards(split)]
    )
    ends = np.flatnonzero(ids == tok.eos_id)
    docs, start = [], 0
    for end in ends:
        docs.append(tok.decode(ids[start:end].tolist()))
        start = end + 1
    assert start == len(ids), "the split ends with an EOS"
    return docs


def cfg(src, out, tok_path, **kw):
    kw = {"validation_fraction": 0.2, "shard_tokens": 3000, **kw}
    return PretokenizeConfig(input=str(src), output=str(out), tokenizer=str(tok_path), **kw)


def digest_of(c: PretokenizeConfig, units: bool = False) -> str:
    settings = settings_digest(c, load_tokenizer(c.tokenizer))
    if not units:
        return settings
    return dataset_digest(settings, plan_units(list_inputs(c.input, c.format), c.format, c.unit_bytes))


def test_end_to_end_every_document_once_followed_by_eos(ray_local, tmp_path, tok_path):
    src = write_jsonl(tmp_path / "in", DOCS)
    m = run(cfg(src, tmp_path / "out", tok_path, workers=2), log=lambda s: None)
    tok = load_tokenizer(tok_path)
    train, val = decode_split(m, tok, "train"), decode_split(m, tok, "validation")
    assert sorted(train + val) == sorted(DOCS)
    assert val == [d for d in DOCS if is_validation(d, 0.2, 0)] and 0 < len(val) < len(DOCS) / 2
    assert (m.splits["train"].documents, m.splits["validation"].documents) == (len(train), len(val))
    assert all(s.tokens == 3000 for s in m.shards("train")[:-1]) and m.dtype == np.uint16
    assert m.tokenizer.fingerprint == tok.fingerprint and m.tokenizer.vocab_size == 1200
    token_shards.verify(m, tokenizer_fingerprint=tok.fingerprint)
    assert not (tmp_path / "out" / PARTS).exists()
    data = TokenWindows(tmp_path / "out", block_size=64, seed=0, tokenizer_fingerprint=tok.fingerprint)
    inputs, _ = data.batch(0, 0, 0, 2, 4)
    assert inputs.shape == (4, 64) and int(inputs.max()) < 1200
    # A rerun of a complete dataset does nothing.
    lines: list[str] = []
    run(cfg(src, tmp_path / "out", tok_path), log=lines.append)
    assert lines == [f"{tmp_path / 'out'}: complete ({m.total_tokens} tokens), nothing to do"]


def test_the_held_out_split_is_deterministic_and_keyed_by_seed():
    assert [is_validation(d, 0.2, 0) for d in DOCS] == [is_validation(d, 0.2, 0) for d in DOCS]
    assert [is_validation(d, 0.2, 0) for d in DOCS] != [is_validation(d, 0.2, 1) for d in DOCS]
    assert not any(is_validation(d, 0.0, 0) for d in DOCS)
    many = [is_validation(str(i), 0.1, 0) for i in range(20000)]
    assert 0.09 < sum(many) / len(many) < 0.11


def test_a_failed_run_resumes_without_rewriting_finished_work(ray_local, tmp_path, tok_path):
    src = write_jsonl(tmp_path / "in", DOCS, files=4)
    last = src / "part-3.jsonl"
    good = last.read_text()
    last.write_text(good + "{not json\n")
    out = tmp_path / "out"
    # One actor: the inputs are tokenized in order, so the first three finish before the fourth fails.
    with pytest.raises(Exception, match=r"line 13 is not a JSON object with a string 'text'"):
        run(cfg(src, out, tok_path, workers=1), log=lambda s: None)
    assert not (out / "manifest.json").exists()
    records = sorted((out / PARTS).glob("[0-9]*.json"))
    assert len(records) == 3
    finished = sorted(p for p in (out / PARTS).iterdir() if not p.name.startswith("."))
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in finished}
    last.write_text(good)
    # Other settings cannot take over the unfinished run's parts.
    other = cfg(src, out, tok_path, workers=2, seed=5)
    held = json.loads((out / PARTS / "settings.json").read_text())["settings_digest"]
    with pytest.raises(PretokenizeError) as info:
        run(other, log=lambda s: None)
    assert str(info.value) == (
        f"--output {out} holds an unfinished run with other inputs or settings (digest {held[:16]}, now "
        f"{digest_of(other)[:16]}); allowed: the same --input, --tokenizer and options to resume it, or an empty --output"
    )
    lines: list[str] = []
    m = run(cfg(src, out, tok_path, workers=2, keep_parts=True), log=lines.append)
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in finished}
    assert after == before
    assert sum("already done" in line for line in lines) == 3
    # Same dataset as a run that never failed.
    clean = run(cfg(src, tmp_path / "clean", tok_path, workers=2), log=lambda s: None)
    assert [s.sha256 for s in m.shards()] == [s.sha256 for s in clean.shards()]

    # A failure while packing: a shard already written is kept, not rewritten.
    (out / "manifest.json").unlink()
    kept = out / m.shards("train")[0].name
    (out / m.shards("train")[1].name).unlink()
    stamp = (kept.stat().st_ino, kept.stat().st_mtime_ns)
    again = run(cfg(src, out, tok_path, workers=2), log=lambda s: None)
    assert (kept.stat().st_ino, kept.stat().st_mtime_ns) == stamp
    assert again.to_dict()["splits"] == m.to_dict()["splits"]
    # A complete dataset is not taken for one of other settings.
    other = cfg(src, out, tok_path, validation_fraction=0.3)
    with pytest.raises(PretokenizeError) as info:
        run(other, log=lambda s: None)
    assert str(info.value) == (
        f"--output {out} holds a dataset made from other inputs or settings (digest "
        f"{again.extra['dataset_digest'][:16]}, now {digest_of(other, units=True)[:16]}); allowed: the same --input, "
        "--tokenizer and options, or another --output"
    )


def test_parquet_and_text_inputs(ray_local, tmp_path, tok_path):
    docs = DOCS[:6]
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"body": docs, "n": list(range(6))}), tmp_path / "pq" / "a.parquet", row_group_size=2)
    m = run(cfg(tmp_path / "pq", tmp_path / "o1", tok_path, text_column="body"), log=lambda s: None)
    tok = load_tokenizer(tok_path)
    assert sorted(decode_split(m, tok, "train") + decode_split(m, tok, "validation")) == sorted(docs)
    assert m.extra["units"] == 1
    # One unit per row group (a tiny unit size): three units, the same dataset.
    split = run(cfg(tmp_path / "pq", tmp_path / "o4", tok_path, text_column="body", unit_bytes=1), log=lambda s: None)
    assert split.extra["units"] == 3
    assert [s.sha256 for s in split.shards()] == [s.sha256 for s in m.shards()]
    (tmp_path / "txt").mkdir()
    for i, d in enumerate(docs[:3]):
        (tmp_path / "txt" / f"{i}.py").write_text(d)
    m = run(cfg(tmp_path / "txt", tmp_path / "o2", tok_path, format="text"), log=lambda s: None)
    assert sorted(decode_split(m, tok, "train") + decode_split(m, tok, "validation")) == sorted(docs[:3])
    with pytest.raises(Exception, match=r"no column 'text'; allowed: body, n"):
        run(cfg(tmp_path / "pq", tmp_path / "o3", tok_path), log=lambda s: None)


def test_bad_options_are_one_message_and_exit_2(tmp_path, tok_path, capsys):
    base = ["--output", str(tmp_path / "o"), "--tokenizer", str(tok_path)]
    assert cli.main(["--input", str(tmp_path / "nope"), *base]) == 2
    assert capsys.readouterr().err == f"pretokenize: --input {tmp_path / 'nope'}: no such file or directory\n"
    assert cli.main(["--input", str(tmp_path), *base, "--validation-fraction", "1.5"]) == 2
    assert capsys.readouterr().err == "pretokenize: --validation-fraction 1.5: allowed 0 <= fraction < 1\n"
    assert cli.main(["--input", str(tmp_path), *base, "--shard-tokens", "1"]) == 2
    assert capsys.readouterr().err == "pretokenize: --shard-tokens 1: allowed 2 or more\n"
    (tmp_path / "empty").mkdir()
    assert cli.main(["--input", str(tmp_path / "empty"), *base, "--format", "jsonl"]) == 2
    assert capsys.readouterr().err == (
        f"pretokenize: --input {tmp_path / 'empty'}: no input files; allowed: .jsonl, .json files (format jsonl)\n"
    )
    out = ["--input", str(tmp_path), "--output", "s3://b/x", "--tokenizer", str(tok_path)]
    assert cli.main(out) == 2
    assert capsys.readouterr().err == (
        "pretokenize: --output s3://b/x: allowed a shared POSIX directory (FSx); the reader reads shards by offset\n"
    )
    assert cli.main(["--input", str(tmp_path), *base, "--unit-mib", "0"]) == 2
    assert capsys.readouterr().err == "pretokenize: --unit-mib 0: allowed more than 0\n"
    with pytest.raises(PretokenizeError) as info:
        PretokenizeConfig(input="x", output="y", tokenizer="bytes", workers=0).check()
    assert str(info.value) == "--workers 0: allowed 1 or more"


def test_a_dataset_of_another_tokenizer_is_refused_on_rerun(ray_local, tmp_path, tok_path):
    src = write_jsonl(tmp_path / "in", DOCS[:8], files=2)
    run(cfg(src, tmp_path / "out", tok_path), log=lambda s: None)
    with pytest.raises(token_shards.DatasetError, match="was tokenized with tokenizer"):
        run(cfg(src, tmp_path / "out", "bytes"), log=lambda s: None)


def test_s3_input(ray_local, s3_server, s3_bucket, tmp_path, tok_path):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL_S3"])
    src = write_jsonl(tmp_path / "in", DOCS[:10], files=2)
    for f in sorted(src.iterdir()):
        s3.put_object(Bucket=s3_bucket, Key=f"corpus/{f.name}", Body=f.read_bytes())
    m = run(cfg(f"s3://{s3_bucket}/corpus", tmp_path / "out", tok_path, workers=2), log=lambda s: None)
    tok = load_tokenizer(tok_path)
    assert sorted(decode_split(m, tok, "train") + decode_split(m, tok, "validation")) == sorted(DOCS[:10])
    assert m.extra["units"] == 2


def test_the_command_runs_in_one_process(tmp_path, tok_path):
    """``python -m workloads.pretokenize --local``: the module runs on its own, without Ray."""
    import subprocess
    import sys
    from pathlib import Path

    src = write_jsonl(tmp_path / "in", DOCS[:4], files=1)
    root = Path(__file__).resolve().parents[3]
    args = ["--input", str(src), "--output", str(tmp_path / "out"), "--tokenizer", str(tok_path), "--local"]
    proc = subprocess.run(
        [sys.executable, "-m", "workloads.pretokenize", *args, "--shard-tokens", "5000"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    m = token_shards.read_manifest(tmp_path / "out")
    assert proc.stdout.splitlines()[-1].startswith(f"{tmp_path / 'out'}: {m.total_tokens} tokens")
    assert m.splits["train"].documents + m.splits["validation"].documents == 4
