"""Export a platform checkpoint as a Hugging Face ``LlamaForCausalLM`` folder (for vLLM,
transformers, the Hub).

    python -m workloads.export --checkpoint DIR --out DIR --tokenizer PATH
        [--max-shard-bytes N] [--dtype bfloat16|float32] [--bos-token-id N] [--eos-token-id N ...]

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.export")
    parser.add_argument("--checkpoint", required=True, help="a checkpoint directory (checkpoint_NNNNNNNNN)")
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write (absent or empty)")
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json, or a folder holding it")
    parser.add_argument("--max-shard-bytes", type=int, default=5 << 30, help="largest safetensors shard (5 GiB)")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="of the written weights")
    parser.add_argument("--bos-token-id", type=int, default=None)
    parser.add_argument("--eos-token-id", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)

    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common import hf_llama

    eos = args.eos_token_id[0] if args.eos_token_id and len(args.eos_token_id) == 1 else args.eos_token_id
    try:
        if not os.path.isdir(args.checkpoint):
            raise hf_llama.HFFormatError(f"--checkpoint {args.checkpoint}: no such directory")
        hf_llama.export_hf(
            args.checkpoint,
            args.out,
            tokenizer_files=tokenizer_files(args.tokenizer),
            max_shard_bytes=args.max_shard_bytes,
            dtype={"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype],
            bos_token_id=args.bos_token_id,
            eos_token_id=eos,
        )
        files = hf_llama.verify_export(args.out)
    except (hf_llama.HFFormatError, ckpt.CheckpointError) as err:
        print(f"export failed: {err}", file=sys.stderr)
        return 2
    with open(os.path.join(args.out, hf_llama.MANIFEST), "rb") as f:
        manifest_sha = hashlib.sha256(f.read()).hexdigest()
    print(json.dumps({"out": os.path.abspath(args.out), "files": files, "manifest_sha256": manifest_sha}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
