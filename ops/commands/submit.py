"""``submit training|inference|job``: the command line (each workload its own options, so an
option of another is refused), the checks and the dry run before any client is made, and the runs.

What it runs on, ops/submit/ by concern: render.py (the workload manifests), prepare.py (``submit
job`` checked, packaged and rendered before any client), job.py (the user job: name, zip, upload,
placement, RayJob), runtime_env.py (``--runtime-env``), follow.py (apply and follow),
job_follow.py (following a user job), progress.py (the progress line from status and log lines)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from config.environment import EnvironmentConfig
from manifests import image as image_mod
from ops.context import Command, CommandSpec, RenderFn
from ops.errors import EXIT_INTERRUPTED, EXIT_OK, NotFoundError, OpsError
from ops.output import to_json
from ops.usage import CommandLine, duration, positive_float, positive_int

if TYPE_CHECKING:
    from ops.submit.prepare import PreparedJob

JOB_HELP = "your own command (after --) on the environment's Ray cluster, your directory uploaded"


def workload_help() -> dict[str, str]:
    """``submit``'s workloads and their help: each registered workload that ``hpray submit``
    offers (manifests/registry.py ``Workload.submit``), then ``job``."""
    from manifests import registry

    return {**{w.key: w.submit for w in registry.workloads() if w.submit}, "job": JOB_HELP}


def register(sub: Any, cli: CommandLine) -> None:
    prog, formatter = cli.prog, cli.formatter
    p = sub.add_parser(
        "submit",
        prog=f"{prog} submit",
        usage="%(prog)s WORKLOAD --env NAME [options]",
        help="submit a workload and follow it",
        description=(
            "Render the workload's manifest from the environment config (the same renderer as\n"
            "`python -m manifests render`), apply it, and follow it: state changes, training steps\n"
            "from the job's own log lines, resumes after failures. Ctrl-C stops following; the job\n"
            "keeps running and the message says how to reattach. --dry-run prints the manifest and\n"
            "calls nothing.\n"
            + "".join(f"  {name:<10}  {text}\n" for name, text in workload_help().items())
            + f"`{prog} submit WORKLOAD --help` shows a workload's options."
        ),
        formatter_class=formatter,
    )
    workloads = p.add_subparsers(dest="workload", metavar="WORKLOAD", required=True, help=argparse.SUPPRESS)
    for name, text in workload_help().items():
        w = workloads.add_parser(
            name,
            prog=f"{prog} submit {name}",
            help=text,
            usage="%(prog)s --env NAME --working-dir DIR [options] -- COMMAND [ARG ...]" if name == "job" else None,
            description=_description(name, prog),
            formatter_class=formatter,
        )
        cli.common(w, kube=True)
        mode = w.add_mutually_exclusive_group()
        mode.add_argument(
            "--attach", action="store_true", help="do not apply anything; follow the workload already submitted"
        )
        mode.add_argument("--no-follow", action="store_true", help="apply and return at once")
        mode.add_argument(
            "--dry-run",
            action="store_true",
            help="print the manifest (YAML; JSON with --json) and exit; nothing is uploaded or applied",
        )
        w.add_argument(
            "--poll-seconds",
            type=positive_float,
            default=5.0,
            metavar="S",
            help="seconds between polls (default: %(default)s)",
        )
        w.add_argument(
            "--timeout-minutes",
            type=positive_float,
            default=None,
            metavar="M",
            help="stop following after M minutes (the job keeps running)",
        )
        if name == "job":
            add_submit_job_options(w)


def add_submit_job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--working-dir", metavar="DIR", type=Path, help="directory to upload and run in (Ray's runtime_env working_dir)"
    )
    p.add_argument(
        "--name",
        metavar="NAME",
        help="job name (default: the directory's name and a random suffix); with --attach, the job to follow",
    )
    p.add_argument(
        "--image",
        metavar="URI",
        help="container image (default: training.image of the environment, else the environment's workloads image)",
    )
    p.add_argument(
        "--gpus", type=positive_int, metavar="N", help="GPUs in total; rounded up to whole nodes of the instance group"
    )
    p.add_argument("--nodes", type=positive_int, metavar="N", help="worker nodes (default 1), when --gpus is not given")
    p.add_argument(
        "--instance-group",
        metavar="NAME",
        help="HyperPod instance group of the workers (default: training.instance_group)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave files matching PATTERN out of the upload (repeatable; .git, __pycache__ and every "
        "virtualenv or conda env always are)",
    )
    p.add_argument(
        "--env-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable of the job (repeatable; wins over the runtime env file's env_vars)",
    )
    p.add_argument(
        "--runtime-env",
        metavar="FILE",
        type=Path,
        help="Ray runtime_env from a YAML or JSON file (pip, uv, conda, env_vars, py_modules, config, ...)",
    )
    p.add_argument(
        "--runtime-env-json",
        metavar="JSON",
        help="""Ray runtime_env inline, as `ray job submit` takes it (e.g. '{"pip": ["emoji"]}'); not with --runtime-env""",
    )
    p.add_argument(
        "--deadline",
        type=duration,
        metavar="SECONDS",
        help="stop the job after this long (RayJob activeDeadlineSeconds; 90, 90m, 6h): at least 60 s, at most "
        "the environment's training.active_deadline_seconds (the default)",
    )
    p.add_argument(
        "--namespace", "-n", metavar="NS", default=None, help="namespace to run in (default: the workloads namespace)"
    )


def _description(workload: str, prog: str) -> str:
    help_text = workload_help()[workload]
    text = help_text[0].upper() + help_text[1:] + "."
    if workload != "job":
        return (
            f"{text}\n\nexamples:\n  {prog} submit {workload} --env dev\n  {prog} submit {workload} --env dev --dry-run"
        )
    return (
        f"{text}\n\nexamples:\n"
        f"  {prog} submit job --env dev --working-dir . --gpus 8 -- python train.py --lr 3e-4\n"
        f"  {prog} submit job --env dev --working-dir . --runtime-env env.yaml -- python train.py\n"
        f"  {prog} submit job --env dev --working-dir . --dry-run -- python train.py   # print the RayJob\n"
        f"  {prog} submit job --env dev --attach --name NAME                          # follow it again"
    )


def print_manifest(manifest: dict[str, Any], out: TextIO, *, json_mode: bool, comments: list[str]) -> int:
    """The manifest a dry run would apply: YAML for ``kubectl apply -f -`` (what it would do
    otherwise as ``#`` comments above it), or JSON."""
    import yaml

    if json_mode:
        print(to_json(manifest), file=out)
        return EXIT_OK
    for line in comments:
        print(f"# {line}", file=out)
    print(yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False).rstrip(), file=out)
    return EXIT_OK


def environment_comment(config: EnvironmentConfig, args: argparse.Namespace) -> str:
    """Which environment file a dry run read (the checkout's, --config-dir's, or the bundled copy)."""
    folder = getattr(args, "config_dir_used", None)
    return f"environment: {folder / f'{config.name}.yaml'}" if folder else f"environment: {config.name}"


def check(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> None:
    """``submit job`` is checked, packaged and rendered here, before any client is made."""
    if args.workload == "job":
        from ops.submit.prepare import prepare_job

        args.prepared = prepare_job(config, args, prog)


def dry_run(config: EnvironmentConfig, args: argparse.Namespace, out: TextIO, render_fn: RenderFn | None) -> int:
    """``submit --dry-run``: the manifest, no client made (ops/cli.py calls it before any)."""
    if args.workload == "job":
        from ops.submit.prepare import job_dry_run_comments

        prepared = args.prepared
        source = (
            f"image: --image {args.image}"
            if args.image
            else image_mod.source_of(config, config.training.image, "training.image")
        )
        return print_manifest(
            prepared.manifest,
            out,
            json_mode=args.json,
            comments=[*job_dry_run_comments(prepared), source, environment_comment(config, args)],
        )
    from ops.submit import render as renderer

    manifest = (render_fn or renderer.render)(args.workload, config)
    meta = manifest["metadata"]
    if args.workload == "inference":
        source = image_mod.source_of(config, config.inference.image or config.training.image, "inference.image")
    else:
        source = image_mod.source_of(config, config.training.image, "training.image")
    return print_manifest(
        manifest,
        out,
        json_mode=args.json,
        comments=[
            f"dry run: {manifest['kind']} {meta.get('namespace', 'default')}/{meta['name']} is not applied",
            source,
            environment_comment(config, args),
        ],
    )


def run(command: Command) -> int:
    return run_submit_job(command) if command.args.workload == "job" else run_submit(command)


def run_submit(command: Command) -> int:
    """``submit training`` and ``submit inference``: apply the manifest and follow it."""
    from ops.submit import render as renderer
    from ops.submit.follow import Follower, Target, apply, reattach_command

    config, args = command.config, command.args
    if args.workload == "training" and not args.attach:
        check_dataset(command)
    kube = command.kube()
    # The image the environment deployed (its cluster's ConfigMap), not one computed from files here.
    if config.training.image is None:
        config = renderer.with_deployed_image(config, renderer.deployed_image(kube, config))
    manifest = (command.render_fn or renderer.render)(args.workload, config)
    kind = manifest["kind"]
    namespace = manifest["metadata"].get("namespace", "default")
    name = manifest["metadata"]["name"]
    # The run's step budget (training.steps) makes the display a fraction with an ETA.
    total_steps = getattr(config.training, "steps", None) if args.workload == "training" else None
    follower = Follower(
        kube,
        Target(workload=args.workload, env=config.name, kind=kind, namespace=namespace, name=name, prog=command.prog),
        command.follow_options(total_steps=total_steps if isinstance(total_steps, int) else None),
    )
    if not args.attach:
        try:
            apply(kube, manifest, follower.emit)
        except KeyboardInterrupt:
            msg = (
                f"interrupted while applying {kind} {namespace}/{name}; it may or may not exist now.\n"
                f"  check:     kubectl -n {namespace} get {kind.lower()} {name}\n"
                f"  reattach:  {reattach_command(args.workload, config.name, command.prog)}"
            )
            follower.emit(msg if follower.json_mode else "\n" + msg, event="interrupted")
            return EXIT_INTERRUPTED
    if args.no_follow:
        follower.emit(f"not following; watch it with: {reattach_command(args.workload, config.name, command.prog)}")
        return EXIT_OK
    return follower.run()


def check_dataset(command: Command) -> None:
    """``training.dataset_path``'s manifest is there before the job is submitted: read in the
    checkpoint bucket's copy (the data repository association exports the pretokenize job's
    output), or OpsError with the command that writes it. A dataset outside the association's
    path cannot be seen from here: the job itself checks it before its first step."""
    from config.pretokenize import TOKEN_SHARDS_FORMAT

    config = command.config
    path = config.training.dataset_path
    if not path:
        return
    manifest = path.rstrip("/") + "/manifest.json"
    copy = config.s3_copy_of(manifest)
    if copy is None:
        command.out.write(
            f"note: training.dataset_path {path} is outside the data repository association's "
            f"/fsx{config.fsx.file_system_path}; its manifest is checked by the job before its first step\n"
        )
        return
    bucket, _, key = copy.removeprefix("s3://").partition("/")
    try:
        body = command.aws.call("s3", "get_object", Bucket=bucket, Key=key)["Body"].read()
    except NotFoundError:
        raise OpsError(
            f"training.dataset_path: {path} has no manifest.json ({copy} is missing): the dataset is not "
            "written yet, or is incomplete (the pretokenize job writes its manifest last)",
            f"{command.prog} submit pretokenize --env {config.name}, then submit training again",
        ) from None
    try:
        fmt = json.loads(body).get("format")
    except (ValueError, AttributeError):
        fmt = None
    if fmt != TOKEN_SHARDS_FORMAT:
        raise OpsError(
            f"training.dataset_path: {copy} is not a token dataset's manifest (format {fmt!r}, "
            f"expected {TOKEN_SHARDS_FORMAT!r})",
            f"point training.dataset_path at the pretokenize job's output ({command.prog} submit pretokenize)",
        )


def run_submit_job(command: Command) -> int:
    """``submit job``: upload the prepared working directory, apply the RayJob and follow it."""
    from manifests.k8s import NAMESPACE
    from ops.submit import job as js
    from ops.submit.follow import Target, apply
    from ops.submit.job_follow import JobFollower

    config, args, prog = command.config, command.args, command.prog
    options = command.follow_options()
    job: PreparedJob | None = args.prepared

    def target(namespace: str, name: str) -> Target:
        return Target(workload="job", env=config.name, kind="RayJob", namespace=namespace, name=name, prog=prog)

    if job is None:  # --attach
        namespace = args.namespace or NAMESPACE
        kube = command.kube()
        from ops.jobs.control import get_job

        get_job(kube, namespace, args.name, prog=prog, env=config.name)
        return JobFollower(kube, target(namespace, args.name), options, prog=prog).run()
    kube = command.kube()
    follower = JobFollower(kube, target(job.namespace, job.name), options, prog=prog)
    if job.image is None:  # the environment's own: what its cluster says it deployed
        from config.teams import team_of_namespace
        from ops.submit.render import deployed_image, set_image

        team = team_of_namespace(list(config.teams), job.namespace) is not None
        set_image(
            job.manifest, deployed_image(kube, config, lambda text: follower.emit(text, event="image"), team=team)
        )
    package, placement = job.package, job.placement
    uploaded = js.upload(command.aws, job.bucket, job.key, package)
    follower.emit(
        f"{'uploaded' if uploaded else 'reusing'} {job.working_dir} ({package.files} files, {len(package.data) >> 10} KiB) as {job.uri}",
        event="uploaded",
        uri=job.uri,
        files=package.files,
        bytes=len(package.data),
    )
    follower.emit(
        f"job {job.name}: {placement.nodes} x {placement.instance_type} ({placement.nodes * placement.gpus_per_node} GPUs) "
        f"in {job.namespace}; checkpoints: {job.checkpoints} (env HPRAY_CHECKPOINT_DIR)",
        event="job",
        name=job.name,
        nodes=placement.nodes,
        gpus=placement.nodes * placement.gpus_per_node,
    )
    apply(kube, job.manifest, follower.emit)
    if args.no_follow:
        follower.emit(
            f"not following; watch it with: {prog} submit job --env {config.name} --attach --name {job.name}  "
            f"(or {prog} logs {job.name} --env {config.name} --follow)"
        )
        return EXIT_OK
    return follower.run()


COMMAND = CommandSpec("submit", register, run=run, check=check, dry_run=dry_run)
