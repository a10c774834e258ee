"""Export a platform checkpoint as a Hugging Face ``LlamaForCausalLM`` folder (for vLLM,
transformers, the Hub).

    python -m workloads.export --checkpoint DIR --out DIR --tokenizer PATH
        [--max-shard-bytes N] [--dtype bfloat16|float32] [--bos-token-id N] [--eos-token-id N ...]
    python -m workloads.export --storage PATH --run-name NAME [--step N] --out DIR --tokenizer bytes
        [--replace] ...

``--storage`` and ``--run-name`` (the training run's, as the export workload of
manifests/registry.py passes them from the config): the run's newest checkpoint that verifies,
or checkpoint ``--step``. ``--tokenizer bytes``: the job's byte tokens as a byte-level
``tokenizer.json`` (ids 0-255 are the UTF-8 bytes; EOS 0). ``--replace``: ``--out`` may hold an
earlier export; the new one is written and verified next to it (``<out>.partial``) and then takes
its place (the earlier one is kept as ``<out>.previous`` until the next export).

The checkpoint is verified first (every file against its manifest, as the serving loader does:
``checkpoint.load(path, keys=[])``, its model config from meta.json), then streamed to ``--out``
one output shard at a time (``hf_llama.export_hf``), and the written folder is verified against
its own ``manifest.json``. ``--tokenizer``: a ``tokenizer.json`` or a folder holding one (with
``tokenizer_config.json`` and ``special_tokens_map.json`` when present). Prints one JSON line
(the folder, its files, the manifest's sha256); a bad input prints what is wrong and exits 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
DTYPES = ("bfloat16", "float32")


def tokenizer_files(path: str) -> list[str]:
    """The tokenizer files at ``path``: the file itself, or those of ``TOKENIZER_FILES`` in it."""
    from workloads.common.hf_llama import HFFormatError

    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        found = [os.path.join(path, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(path, n))]
        if any(os.path.basename(f) == "tokenizer.json" for f in found):
            return found
        raise HFFormatError(f"--tokenizer {path}: the folder holds no tokenizer.json")
    raise HFFormatError(
        f"--tokenizer {path}: no such file or folder; allowed: a tokenizer.json or a folder holding one"
    )


def run_checkpoint(storage: str, run_name: str, step: int | None) -> str:
    """The checkpoint to export of run ``run_name`` under ``storage``: ``step``'s, or the newest
    one that verifies (every file against its manifest); names what is wrong otherwise."""
    from workloads.common import checkpoint as ckpt
    from workloads.common.hf_llama import HFFormatError

    found = ckpt.list_checkpoints(storage, run_name)
    if step is not None:
        found = [(s, p) for s, p in found if s == step]
        if not found:
            raise HFFormatError(f"--step {step}: run {run_name!r} under {storage} has no checkpoint of step {step}")
    problems = []
    for _, path in found:
        bad = ckpt.verify(path)
        if not bad:
            return path
        problems.append(f"{path}: {bad[0]}")
    if not problems:
        raise HFFormatError(f"run {run_name!r} under {storage} has no checkpoint yet")
    raise HFFormatError("no checkpoint verifies: " + "; ".join(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.export")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a checkpoint directory (checkpoint_NNNNNNNNN)")
    source.add_argument("--storage", help="the training storage path (with --run-name): the run's checkpoints")
    parser.add_argument("--run-name", help="the training run (with --storage)")
    parser.add_argument(
        "--step", type=int, default=None, help="with --storage: this step's checkpoint (default: newest)"
    )
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write (absent or empty)")
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json, a folder holding it, or 'bytes'")
    parser.add_argument("--replace", action="store_true", help="--out may hold an earlier export: replace it")
    parser.add_argument("--max-shard-bytes", type=int, default=5 << 30, help="largest safetensors shard (5 GiB)")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="of the written weights")
    parser.add_argument("--bos-token-id", type=int, default=None)
    parser.add_argument("--eos-token-id", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)
    if args.storage is not None and not args.run_name:
        parser.error("--storage needs --run-name")
    if args.storage is None and (args.run_name or args.step is not None):
        parser.error("--run-name and --step go with --storage")

    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common import hf_llama

    eos = args.eos_token_id[0] if args.eos_token_id and len(args.eos_token_id) == 1 else args.eos_token_id
    out = args.out.rstrip("/") or args.out
    try:
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = run_checkpoint(args.storage, args.run_name, args.step)
        files = export_checkpoint(
            checkpoint,
            out,
            args.tokenizer,
            replace=args.replace,
            max_shard_bytes=args.max_shard_bytes,
            dtype={"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype],
            bos_token_id=args.bos_token_id,
            eos_token_id=eos,
        )
    except (hf_llama.HFFormatError, ckpt.CheckpointError) as err:
        print(f"export failed: {err}", file=sys.stderr)
        return 2
    print(f"exported {checkpoint} to {os.path.abspath(out)}", file=sys.stderr, flush=True)
    with open(os.path.join(out, hf_llama.MANIFEST), "rb") as f:
        manifest_sha = hashlib.sha256(f.read()).hexdigest()
    print(json.dumps({"out": os.path.abspath(args.out), "files": files, "manifest_sha256": manifest_sha}), flush=True)
    return 0


def export_checkpoint(
    checkpoint: str,
    out: str,
    tokenizer: str,
    *,
    replace: bool = False,
    max_shard_bytes: int = 5 << 30,
    dtype: Any = None,
    bos_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
) -> list[str]:
    """``checkpoint`` (a verified checkpoint directory) written to ``out`` as a Hugging Face
    folder, streamed one output shard at a time and verified against its manifest; returns its
    files. ``tokenizer``: a tokenizer.json, a folder holding one, or ``bytes`` (the job's byte
    tokens, EOS 0). ``replace``: ``out`` may hold an earlier export, which the new one, written
    and verified as ``<out>.partial``, replaces (the earlier kept as ``<out>.previous``). The
    export command and the training job's end-of-run export (``training.export_at_end``) call it."""
    import shutil
    import tempfile

    import torch

    from workloads.common import hf_llama

    target = f"{out}.partial" if replace else out
    if not os.path.isdir(checkpoint):
        raise hf_llama.HFFormatError(f"--checkpoint {checkpoint}: no such directory")
    with tempfile.TemporaryDirectory() as tmp:
        if tokenizer == "bytes":
            tokenizer = os.path.join(tmp, "tokenizer.json")
            with open(tokenizer, "w") as f:
                json.dump(hf_llama.byte_tokenizer_json(), f)
            if eos_token_id is None:
                eos_token_id = 0  # ByteTokenizer's EOS
        if replace and os.path.exists(target):
            shutil.rmtree(target)  # an earlier export that did not finish
        hf_llama.export_hf(
            checkpoint,
            target,
            tokenizer_files=tokenizer_files(tokenizer),
            max_shard_bytes=max_shard_bytes,
            dtype=dtype if dtype is not None else torch.bfloat16,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
        )
    hf_llama.verify_export(target)
    if replace:
        _swap(target, out)
    return hf_llama.verify_export(out)


def _swap(new: str, out: str) -> None:
    """``new`` (a verified export) takes the place of ``out``; an earlier ``out`` is kept as
    ``<out>.previous`` (one rename each: a reader sees the old folder or the new one)."""
    import shutil

    previous = f"{out}.previous"
    if os.path.exists(out):
        if os.path.exists(previous):
            shutil.rmtree(previous)
        os.rename(out, previous)
    os.rename(new, out)


if __name__ == "__main__":
    sys.exit(main())
