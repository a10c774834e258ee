"""``python -m workloads.pretokenize``: raw documents → token shards and a manifest, on Ray Data.

    python -m workloads.pretokenize --input s3://bucket/corpus/ --output /fsx/data/corpus-llama3 \
        --tokenizer /fsx/tokenizers/llama3/tokenizer.json [--format parquet|jsonl|text] \
        [--text-column text] [--validation-fraction 0.01] [--shard-tokens N] [--seed S] [--workers N] [--local]

Connects to the Ray cluster of ``RAY_ADDRESS`` (a RayJob's driver) or starts a local one. A bad
option or input prints one line saying what is wrong and exits with 2; rerunning after a failure
resumes (finished inputs and shards are kept).
"""

from __future__ import annotations

import argparse
import sys

from workloads.common.token_shards import DatasetError
from workloads.common.tokenizer import TokenizerError
from workloads.pretokenize.pipeline import FORMATS, PretokenizeConfig, PretokenizeError, run


def parse_args(argv: list[str] | None = None) -> tuple[bool, PretokenizeConfig]:
    p = argparse.ArgumentParser(prog="python -m workloads.pretokenize", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, help="a file, directory or s3:// prefix of documents")
    p.add_argument("--output", required=True, help="the dataset directory (shared POSIX path, e.g. /fsx/...)")
    p.add_argument("--tokenizer", required=True, help='a tokenizer.json (path or s3:// URI), or "bytes"')
    p.add_argument("--format", choices=FORMATS, help="input format (default: by file extension; else text)")
    p.add_argument("--text-column", default="text", help="the text field of Parquet/JSON Lines rows")
    p.add_argument("--validation-fraction", type=float, default=0.01)
    p.add_argument("--shard-tokens", type=int, default=1 << 26, help="tokens per shard (default 2**26)")
    p.add_argument("--seed", type=int, default=0, help="key of the train/validation hash")
    p.add_argument("--workers", type=int, help="tokenizer actors (default: the cluster's CPUs / --cpus-per-worker)")
    p.add_argument("--cpus-per-worker", type=int, default=1, help="CPUs (and tokenizer threads) of each actor")
    p.add_argument("--eos-token", help="the tokenizer's end-of-sequence token (default: found)")
    p.add_argument("--keep-parts", action="store_true", help="keep the per-input part files")
    p.add_argument("--unit-mib", type=float, default=256, help="Parquet row groups per unit of work, in MiB")
    p.add_argument("--local", action="store_true", help="tokenize in this process, without Ray")
    a = p.parse_args(argv)
    return a.local, PretokenizeConfig(
        input=a.input,
        output=a.output,
        tokenizer=a.tokenizer,
        format=a.format,
        text_column=a.text_column,
        validation_fraction=a.validation_fraction,
        shard_tokens=a.shard_tokens,
        seed=a.seed,
        workers=a.workers,
        keep_parts=a.keep_parts,
        eos_token=a.eos_token,
        unit_bytes=int(a.unit_mib * 2**20),
        cpus_per_worker=a.cpus_per_worker,
    )


def main(argv: list[str] | None = None) -> int:
    local, cfg = parse_args(argv)
    try:
        cfg.check()
        run(cfg, local=local)
    except (PretokenizeError, TokenizerError, DatasetError) as err:
        print(f"pretokenize: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
