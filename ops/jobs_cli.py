"""The command line of the job commands (``jobs``, ``describe``, ``pods``, ``logs``, ``stop``,
``resume``, ``dashboard``): their options, the checks of their arguments, and the glue from parsed
arguments to ops/jobs.py, ops/job_inspect.py and ops/portforward.py. ``submit job`` is
ops/job_cli.py."""

from __future__ import annotations

import argparse
from typing import Any

from ops.context import Command
from ops.errors import EXIT_OK, UsageError
from ops.output import to_json
from ops.usage import positive_int

JOB_COMMANDS = ("jobs", "describe", "pods", "logs", "stop", "resume", "dashboard")


def _namespace(parser: argparse.ArgumentParser) -> None:
    from manifests.k8s import NAMESPACE

    parser.add_argument(
        "--namespace", "-n", metavar="NS", default=NAMESPACE, help="namespace of the jobs (default: %(default)s)"
    )


def add_job_commands(sub: Any, prog: str, common: Any, formatter: Any) -> None:
    def job_parser(name: str, help_: str, description: str, *, target: str | None, examples: list[str]) -> Any:
        """A job command: NAME (``target`` "required"/"optional"/None), the common and --namespace options."""
        p = sub.add_parser(
            name,
            prog=f"{prog} {name}",
            help=help_,
            formatter_class=formatter,
            description=description,
            epilog="examples:\n" + "".join(f"  {prog} {e}\n" for e in examples),
        )
        if target == "required":
            p.add_argument("name", metavar="NAME", help="the RayJob")
        elif target == "optional":
            p.add_argument(
                "name", metavar="NAME", nargs="?", help="RayJob or RayService (default: the only running one)"
            )
        common(p, kube=True)
        _namespace(p)
        return p

    p = job_parser(
        "jobs",
        "list RayJobs",
        "List the RayJobs (newest first) with their KubeRay state, the Ray job's state, failed\n"
        "attempts and start/end times. A namespaced list: a team's Role is enough for -n TEAM.",
        target=None,
        examples=["jobs --env dev", "jobs --env dev -n team-vision --json"],
    )
    p.add_argument("--all-namespaces", "-A", action="store_true", help="every namespace (needs cluster-wide list)")
    job_parser(
        "describe",
        "show one job: spec, state, pods, events",
        "Show one RayJob as `kubectl describe` and `ray job status` would together: its command,\n"
        "image, runtime env and workers; KubeRay's state, the Ray job's state, attempts and the last\n"
        "message; its pods; and the newest events of the job and its pods.",
        target="required",
        examples=["describe NAME --env dev", "describe NAME --env dev --json | jq .pods"],
    )
    job_parser(
        "pods",
        "list one job's pods",
        "List the pods of a RayJob's Ray cluster (head and workers) with their phase, readiness,\n"
        "restarts, node and age. `logs NAME --pod POD` prints one of them.",
        target="required",
        examples=["pods NAME --env dev"],
    )
    p = job_parser(
        "logs",
        "print or follow a job's driver log, a pod's log, or download them all",
        "Print the driver's log of a RayJob (the job's stdout and stderr), read from its Ray head's\n"
        "Jobs API through the Kubernetes API's port-forward. --follow prints what it adds until the\n"
        "job ends, and goes on to the next Ray job when KubeRay retries.\n"
        "--pod POD prints one pod's log instead (`pods NAME` lists them); --output-dir DIR writes the\n"
        "driver's log and every pod's logs (the previous container's too) into DIR/NAME/.",
        target="required",
        examples=[
            "logs NAME --env dev --follow",
            "logs NAME --env dev --pod NAME-x7k2p-head-abcde --tail 100",
            "logs NAME --env dev --output-dir ./logs",
        ],
    )
    p.add_argument("--follow", "-f", action="store_true", help="print new lines until the job (or pod) ends")
    p.add_argument(
        "--tail",
        type=positive_int,
        metavar="N",
        default=None,
        help="only the last N lines (of the first attempt shown)",
    )
    p.add_argument("--pod", metavar="POD", help="one pod's log instead of the driver's (see `pods NAME`)")
    p.add_argument("--container", "-c", metavar="NAME", help="with --pod: the container (default: the pod's first)")
    p.add_argument("--previous", action="store_true", help="with --pod: the log of the container's previous run")
    p.add_argument("--output-dir", metavar="DIR", help="write the driver's and every pod's logs into DIR/NAME/")
    p = job_parser(
        "stop",
        "stop a job; checkpoints stay",
        "Stop a RayJob: KubeRay deletes its Ray cluster (the GPUs are free at once) and keeps the\n"
        "job as Suspended (spec.suspend); `resume` starts it again. --delete deletes the RayJob\n"
        "object instead. Either way the checkpoints on FSx and in S3 stay.",
        target="required",
        examples=["stop NAME --env dev", "stop NAME --env dev --delete"],
    )
    p.add_argument("--delete", action="store_true", help="delete the RayJob instead of suspending it")
    job_parser(
        "resume",
        "restart a stopped job",
        "Resume a stopped (suspended) RayJob: KubeRay creates a new Ray cluster and submits the\n"
        "job again; a job that checkpoints resumes from its newest checkpoint.",
        target="required",
        examples=["resume NAME --env dev"],
    )
    p = job_parser(
        "dashboard",
        "port-forward to a Ray head's dashboard",
        "Port-forward a local port to the Ray dashboard of a job's (or service's) head pod\n"
        "through the Kubernetes API and print the local URL (with the token where Ray's token\n"
        "authentication is on). Without NAME: the only running Ray cluster of the namespace.\n"
        "Ctrl-C ends it.",
        target="optional",
        examples=["dashboard --env dev", "dashboard NAME --env dev --port 0"],
    )
    p.add_argument(
        "--port", type=int, default=8265, metavar="PORT", help="local port (default: %(default)s; 0 picks a free one)"
    )


def check_job_args(args: argparse.Namespace, prog: str) -> None:
    """What argparse cannot see: options that exclude each other or need another (exit 2)."""
    if args.command == "dashboard" and not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port", "use 1-65535, or 0 for any free port")
    if args.command != "logs":
        return
    if not args.pod and (args.container or args.previous):
        given = "--container" if args.container else "--previous"
        raise UsageError(
            f"{given} is for one pod's log: it needs --pod POD",
            f"list the pods with: {prog} pods {args.name} --env {args.env}",
        )
    if args.output_dir is not None:
        other = next(
            (o for o, on in (("--follow", args.follow), ("--pod", args.pod), ("--tail", args.tail)) if on), None
        )
        if other:
            raise UsageError(
                f"--output-dir writes every log of the job; it does not take {other}", f"leave out {other}"
            )
        from pathlib import Path

        if Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
            raise UsageError(f"--output-dir {args.output_dir}: not a directory", "name a directory (it is created)")


def run_job_command(command: Command) -> int:
    from ops import job_inspect, jobs

    args, out, prog, env = command.args, command.out, command.prog, command.env
    sleep, token_fn = command.sleep, command.token_fn
    kube = command.kube()
    if args.command == "jobs":
        rows = jobs.list_jobs(kube, None if args.all_namespaces else args.namespace)
        print(to_json({"environment": env, "jobs": rows}) if args.json else jobs.render_jobs(rows), file=out)
        return EXIT_OK
    if args.command in ("describe", "pods"):
        fn = job_inspect.describe if args.command == "describe" else job_inspect.job_pods
        report = fn(kube, args.namespace, args.name, prog=prog, env=env)
        render = job_inspect.render_describe if args.command == "describe" else job_inspect.render_pods
        print(to_json(report) if args.json else render(report), file=out)
        return EXIT_OK
    if args.command == "logs" and args.pod:
        return job_inspect.pod_log(
            kube,
            args.namespace,
            args.name,
            args.pod,
            container=args.container,
            previous=args.previous,
            tail=args.tail,
            follow=args.follow,
            out=out,
            prog=prog,
            env=env,
        )
    if args.command == "logs" and args.output_dir is not None:
        return job_inspect.download_logs(
            kube, args.namespace, args.name, args.output_dir, out=out, prog=prog, env=env, token_fn=token_fn
        )
    if args.command == "logs":
        return jobs.show_logs(
            kube,
            args.namespace,
            args.name,
            follow=args.follow,
            tail=args.tail,
            out=out,
            json_mode=args.json,
            prog=prog,
            env=env,
            sleep=sleep,
            token_fn=token_fn,
        )
    if args.command in ("stop", "resume"):
        result = (
            jobs.stop_job(kube, args.namespace, args.name, delete=args.delete, prog=prog, env=env)
            if args.command == "stop"
            else jobs.resume_job(kube, args.namespace, args.name, prog=prog, env=env)
        )
        print(to_json(result) if args.json else result["message"], file=out)
        return EXIT_OK
    from ops.portforward import serve_dashboard

    return serve_dashboard(
        kube,
        args.namespace,
        args.name,
        local_port=args.port,
        out=out,
        json_mode=args.json,
        prog=prog,
        env=env,
        token_fn=token_fn,
    )
