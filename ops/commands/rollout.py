"""``rollout inference|llm [--model PATH]``: start or update a Ray Serve service with a chosen
model and follow its rollout (ops/submit/follow.py, as ``submit inference``). The LLM service's
model is an export (``python -m workloads.export``) whose manifest.json is verified first
(``workloads.common.hf_llama.verify_export``; in S3, every listed file's size). ``endpoint``
reaches the service's endpoint."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TextIO

from config.environment import EnvironmentConfig
from ops.context import Command, CommandSpec, RenderFn
from ops.errors import OpsError, UsageError
from ops.usage import CommandLine, positive_float

# rollout SERVICE -> the registry's workload (manifests/registry.py)
SERVICES = {"inference": "inference", "llm": "inference-llm"}
HELP = {
    "inference": "the generation service: --model is where the training run's checkpoints are (inference.storage_path)",
    "llm": "the Ray Serve LLM service: --model is a verified Hugging Face export (inference.llm.model_source)",
}


def register(sub: Any, cli: CommandLine) -> None:
    p = sub.add_parser(
        "rollout",
        prog=f"{cli.prog} rollout",
        usage="%(prog)s SERVICE --env NAME [--model PATH] [options]",
        help="start or update a service with a chosen model and follow its rollout",
        formatter_class=cli.formatter,
        description=(
            "Render the service's RayService with the model you choose (the environment file's otherwise),\n"
            "apply it and follow the rollout until it is Ready; the LLM service's export is verified against\n"
            "its manifest.json first. --dry-run prints the RayService and calls nothing.\n"
            + "".join(f"  {name:<10}  {text}\n" for name, text in HELP.items())
            + f"Then `{cli.prog} endpoint SERVICE` reaches its endpoint locally."
        ),
    )
    services = p.add_subparsers(dest="service", metavar="SERVICE", required=True, help=argparse.SUPPRESS)
    for name, text in HELP.items():
        s = services.add_parser(
            name,
            prog=f"{cli.prog} rollout {name}",
            help=text,
            formatter_class=cli.formatter,
            description=f"{text[0].upper()}{text[1:]}.\n\nexamples:\n"
            + (
                f"  {cli.prog} rollout llm --env dev --model s3://my-bucket/exports/llama-8b/\n"
                f"  {cli.prog} rollout llm --env dev --model /fsx/exports/llama-8b --dry-run"
                if name == "llm"
                else f"  {cli.prog} rollout inference --env dev --run gpt-bytes\n"
                f"  {cli.prog} rollout inference --env dev --model s3://my-bucket/runs/ --dry-run"
            ),
        )
        cli.common(s, kube=True)
        s.add_argument("--model", metavar="PATH", help="the model (see above; default: the environment file's)")
        if name == "inference":
            s.add_argument("--run", metavar="NAME", help="the training run whose newest intact checkpoint is served")
        else:
            s.add_argument(
                "--no-verify", action="store_true", help="skip the check of the export against its manifest.json"
            )
        mode = s.add_mutually_exclusive_group()
        mode.add_argument("--attach", action="store_true", help="apply nothing; follow the service's rollout again")
        mode.add_argument("--no-follow", action="store_true", help="apply and return at once")
        mode.add_argument(
            "--dry-run", action="store_true", help="print the RayService (YAML; JSON with --json) and exit"
        )
        s.add_argument("--poll-seconds", type=positive_float, default=5.0, metavar="S", help="seconds between polls")
        s.add_argument(
            "--timeout-minutes", type=positive_float, default=None, metavar="M", help="stop following after M minutes"
        )


def with_model(config: EnvironmentConfig, args: argparse.Namespace) -> EnvironmentConfig:
    """``config`` with the service's model as the command line chose it, checked as the config is."""
    from pydantic import ValidationError

    data = config.model_dump()
    if args.service == "llm":
        data["inference"]["llm"]["enabled"] = True
        if args.model:
            # A model chosen on the command line is checked against its own manifest.json below
            # (verify_local, verify_s3), not against training.export_path: any verified export
            # (inference.llm.external_model; the environment file's model keeps the synth check).
            data["inference"]["llm"]["model_source"] = args.model
            data["inference"]["llm"]["external_model"] = True
    else:
        if args.model:
            data["inference"]["storage_path"] = args.model
        if args.run:
            data["inference"]["run_name"] = args.run
    try:
        return type(config).model_validate(data)
    except ValidationError as err:
        from config.loader import format_validation_error

        problems = format_validation_error(err)
        raise UsageError(
            f"--model {args.model}: " + "; ".join(problems) if args.model else "; ".join(problems),
            "see the service's fields in docs/reference/configuration.md",
        ) from None


def verify_local(source: str, *, no_verify: bool) -> str | None:
    """The LLM export checked against its manifest.json where this machine can read it; what was
    checked, or None when it is in S3 (checked at run, with your AWS identity)."""
    import os

    from workloads.common.hf_llama import HFFormatError, verify_export

    if no_verify or source.startswith("s3://"):
        return None
    if not os.path.isdir(source):
        raise UsageError(
            f"--model {source}: not a folder this machine can read, so its export cannot be verified",
            "run it where FSx is mounted, give the export's s3:// URI, or pass --no-verify",
        )
    try:
        files = verify_export(source)
    except HFFormatError as err:
        raise UsageError(f"--model {source}: {err}", "export the model again (python -m workloads.export)") from None
    return f"verified {len(files)} files of {source} against its manifest.json"


def verify_s3(aws: Any, source: str) -> str:
    """An export in S3: manifest.json read, and every file it lists present with its size."""
    import json

    from botocore.exceptions import ClientError

    from workloads.common.hf_llama import EXPORT_FORMAT, MANIFEST

    bucket, _, prefix = source.removeprefix("s3://").partition("/")
    prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    s3 = aws.client("s3")
    try:
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=prefix + MANIFEST)["Body"].read())
        if manifest.get("format") != EXPORT_FORMAT:
            raise OpsError(
                f"{source}{MANIFEST}: format is {manifest.get('format')!r}; allowed: {EXPORT_FORMAT!r}",
                "export the model again (python -m workloads.export)",
            )
        for name, want in manifest["files"].items():
            size = s3.head_object(Bucket=bucket, Key=prefix + name)["ContentLength"]
            if size != want["size"]:
                raise OpsError(
                    f"{source}{name}: {size} bytes, manifest.json says {want['size']}",
                    "export the model again (python -m workloads.export)",
                )
    except ClientError as err:
        raise OpsError(
            f"cannot verify the export {source}: {err.response.get('Error', {}).get('Code')} ({err})",
            "check the URI (the export's folder, with manifest.json) and your access to it, or pass --no-verify",
        ) from None
    return f"verified {len(manifest['files'])} files of {source} against its manifest.json (sizes)"


def check(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> None:
    """The model and its export, before any client is made (exit 2)."""
    args.rollout_config = with_model(config, args)
    args.verified = None
    if args.service == "llm" and not args.attach:
        source = args.rollout_config.inference.llm.model_source
        args.verified = verify_local(source, no_verify=args.no_verify)


def dry_run(config: EnvironmentConfig, args: argparse.Namespace, out: TextIO, render_fn: RenderFn | None) -> int:
    from manifests import image as image_mod
    from ops.commands.submit import print_manifest
    from ops.submit import render as renderer

    cfg = args.rollout_config
    manifest = (render_fn or renderer.render)(SERVICES[args.service], cfg)
    meta = manifest["metadata"]
    comments = [f"dry run: RayService {meta.get('namespace', 'default')}/{meta['name']} is not applied"]
    if args.verified:
        comments.append(args.verified)
    if args.service == "llm":  # the pinned Ray LLM image (vLLM), not the workloads image
        head = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        comments.append(f"image: {head['image']} (the Ray LLM image the environment pins)")
    else:
        comments.append(image_mod.source_of(cfg, cfg.inference.image or cfg.training.image, "inference.image"))
    from ops.commands.submit import environment_comment

    return print_manifest(manifest, out, json_mode=args.json, comments=[*comments, environment_comment(cfg, args)])


def run(command: Command) -> int:
    from ops.commands.submit import run_submit

    args = command.args
    cfg = args.rollout_config
    if args.service == "llm" and not args.attach and not args.no_verify:
        source = cfg.inference.llm.model_source
        verified = args.verified or (verify_s3(command.aws, source) if source.startswith("s3://") else None)
        if verified:
            from ops.output import to_json

            line = to_json({"event": "verified", "message": verified}, compact=True) if args.json else verified
            print(line, file=command.out)
    args.workload = SERVICES[args.service]
    return run_submit(dataclasses.replace(command, config=cfg))


COMMAND = CommandSpec("rollout", register, run=run, check=check, dry_run=dry_run)
