"""Batch inference: prompts from Parquet or JSON lines (FSx or S3) through vLLM engines
(``ray.data.llm``) to Parquet, on the Ray cluster of its RayJob.

    python -m workloads.batch_inference --config-json '{"input_path": ..., "processor": {...}}'

The JSON is what manifests/batch_inference.py renders from the ``batch_inference:`` section:
``input_path``, ``input_format`` (parquet or json), ``prompt_column``, ``output_path``,
``sampling`` (max_tokens, temperature) and ``processor``, the keyword arguments of Ray's
``vLLMEngineProcessorConfig`` (checked against that model when the manifest is rendered).
``preprocess`` and ``postprocess`` are pure functions of a row (tested on CPU); the processor is
built only on the cluster (``build``: vLLM needs a GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# The columns each output row holds: the prompt and what the engine made of it.
OUTPUT_COLUMNS = ("prompt", "generated_text", "num_input_tokens", "num_generated_tokens")


def preprocess(row: dict[str, Any], *, prompt_column: str, sampling: dict[str, Any]) -> dict[str, Any]:
    """One input row as the vLLM engine stage takes it: the prompt's text and its sampling
    parameters. A row without the prompt column names it and the columns it has."""
    if prompt_column not in row:
        raise KeyError(
            f"batch_inference.prompt_column: {prompt_column!r} is not a column of the input; columns: {sorted(row)}"
        )
    prompt = row[prompt_column]
    if not isinstance(prompt, str):
        raise TypeError(f"batch_inference.prompt_column: {prompt_column!r} holds {type(prompt).__name__}, not text")
    return {"prompt": prompt, "sampling_params": dict(sampling)}


def postprocess(row: dict[str, Any]) -> dict[str, Any]:
    """One engine output row as the Parquet output holds it (``OUTPUT_COLUMNS``)."""
    return {
        "prompt": row["prompt"],
        "generated_text": row.get("generated_text", ""),
        "num_input_tokens": int(row.get("num_input_tokens") or 0),
        "num_generated_tokens": int(row.get("num_generated_tokens") or 0),
    }


def read(config: dict[str, Any]) -> Any:
    """The prompts as a Ray Dataset."""
    import ray.data

    path = config["input_path"]
    return ray.data.read_json(path) if config["input_format"] == "json" else ray.data.read_parquet(path)


def build(config: dict[str, Any]) -> Any:
    """The ``ray.data.llm`` processor of ``config`` (on the cluster: vLLM needs a GPU)."""
    import functools

    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    return build_processor(
        vLLMEngineProcessorConfig(**config["processor"]),
        preprocess=functools.partial(preprocess, prompt_column=config["prompt_column"], sampling=config["sampling"]),
        postprocess=postprocess,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.batch_inference")
    parser.add_argument("--config-json", required=True, help="the rendered batch_inference settings (JSON)")
    config = json.loads(parser.parse_args(argv).config_json)
    import ray

    ray.init()
    processor = build(config)
    processor(read(config)).write_parquet(config["output_path"])
    print(json.dumps({"output_path": config["output_path"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
