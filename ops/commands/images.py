"""``images pin-base``: pin the workloads image's base by digest in workloads/Dockerfile (Docker
Hub's registry API, no AWS, no environment: ops/reports/base_image.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ops.context import CommandSpec
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    from ops.reports import base_image

    p = sub.add_parser(
        "images",
        prog=f"{cli.prog} images",
        help="pin the workloads image's base by digest",
        formatter_class=cli.formatter,
        description="pin-base: read the digest of the workloads image's base tag (ARG RAY_BASE) from Docker\n"
        "Hub's registry API and write it into ARG RAY_BASE_DIGEST of the Dockerfile. Needs HTTPS to\n"
        "Docker Hub, no AWS call; rerun it after changing RAY_BASE. preflight and status fail while the\n"
        "slot is empty.",
    )
    p.add_argument("action", metavar="ACTION", choices=["pin-base"], help="pin-base: fill the base image's digest slot")
    p.add_argument(
        "--dockerfile",
        type=Path,
        default=base_image.DOCKERFILE,
        metavar="PATH",
        help="the Dockerfile (default: %(default)s)",
    )
    p.add_argument(
        "--auth-url", default=base_image.DOCKER_HUB_AUTH, metavar="URL", help="token endpoint (default: %(default)s)"
    )
    p.add_argument(
        "--registry-url",
        default=base_image.DOCKER_HUB_REGISTRY,
        metavar="URL",
        help="registry API (default: %(default)s)",
    )


def run_local(args: argparse.Namespace, out: TextIO, parser: argparse.ArgumentParser) -> int:
    from ops.reports.base_image import pin_base

    return pin_base(args.dockerfile, out, auth_url=args.auth_url, registry_url=args.registry_url)


COMMAND = CommandSpec("images", register, run_local=run_local)
