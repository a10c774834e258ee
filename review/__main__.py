"""``python -m review CDK_OUT [--compare OLD_CDK_OUT] [--out DIR]``: write, per environment,
``<env>.md``, ``<env>.html`` and ``architecture-<env>.{dot,svg,png}`` under ``CDK_OUT/review``.

Every flow of the flow table (``constructs/flow_table.py``) is proven against the templates (review/flows.py); the
report lists each with what allows it, and a flow that nothing allows makes the command exit 4
after the reports are written, one line per flow on stderr. Every document a template carries
(alert manager definition, alerting rules, the collector's scrape configuration) is checked by
the engine that reads it (review/engines.py). The images table (review/images.py) lists every
image a pod runs with its source. A document that its engine rejects, or in a
``network.images_from_ecr`` environment a pod whose image nothing makes present (or images that
cannot be rendered), makes the command exit 5 after the reports are written, one line each on
stderr."""

from __future__ import annotations

from review.node import quiet_jsii

quiet_jsii()  # before review.flows starts jsii

import argparse
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from config.prices import load_prices
from review.assembly import AssemblyError, load_assembly
from review.compare import compare
from review.cost import estimate
from review.diagram import DiagramError, render_diagram
from review.engines import ToolMissing, check_documents, failed_lines
from review.flows import broken_lines, check_flows
from review.images import ImageRow, ImagesUnavailable, image_rows, unfilled
from review.report import build_report

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from review.assembly import Stack


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date; expected YYYY-MM-DD") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m review", description=__doc__)
    parser.add_argument("assembly", help="cloud assembly directory (cdk.out)")
    parser.add_argument("--compare", metavar="PATH", help="a previous cloud assembly to diff against")
    parser.add_argument("--out", metavar="DIR", help="output directory (default: ASSEMBLY/review)")
    parser.add_argument("--prices", metavar="YAML", help="price table (default: config/prices.yaml)")
    parser.add_argument("--no-diagram", action="store_true", help="skip the graphviz diagram")
    parser.add_argument(
        "--date",
        metavar="YYYY-MM-DD",
        type=_date,
        default=None,
        help="price the EKS control plane by its Kubernetes version's support status on this day "
        "(default: config/versions.py SUPPORT_STATUS_AS_OF)",
    )
    args = parser.parse_args(argv)
    try:
        assembly = load_assembly(args.assembly)
        old = load_assembly(args.compare) if args.compare else None
    except AssemblyError as err:
        print(f"review: {err}", file=sys.stderr)
        return 2
    if not assembly.stacks:
        print(f"review: {args.assembly} has no stacks", file=sys.stderr)
        return 2
    prices = load_prices(args.prices) if args.prices else load_prices()
    out = Path(args.out) if args.out else assembly.directory / "review"
    out.mkdir(parents=True, exist_ok=True)
    groups = assembly.groups()
    old_groups = old.groups() if old else {}
    broken: list[str] = []
    rejected: list[str] = []
    missing_images: list[str] = []
    left_out: list[str] = []  # sections a report could not render (said last)
    for env, stacks in groups.items():
        try:
            documents = check_documents(stacks)
        except ToolMissing as err:
            print(f"review: {err}", file=sys.stderr)
            return 2
        rejected += failed_lines(env, documents)
        flow_results = None
        images: list[ImageRow] | None = None
        images_unavailable = None
        config = config_for(env, stacks)
        if config is not None:
            flow_results = check_flows(stacks, config)
            broken += broken_lines(env, flow_results)
            try:
                images = image_rows(stacks, config)
                missing_images += unfilled(env, images)
            except ImagesUnavailable as err:
                images_unavailable = str(err)
                if config.network.images_from_ecr:
                    missing_images.append(f"images: {env}: {err}")
                else:
                    left_out.append(f"review: {env}: the images section is left out of the report: {err}")
        comparison = None
        if old is not None:
            old_stacks = old_groups.get(env)
            if old_stacks is None and len(groups) == 1 and len(old_groups) == 1:
                old_stacks = next(iter(old_groups.values()))
            comparison = compare(old_stacks or [], stacks, old_label=f"`{args.compare}`", prices=prices)
        diagram = None
        if not args.no_diagram:
            try:
                files = render_diagram(
                    stacks, env=env, exports=assembly.exports(), out_dir=out, config=config, flows=flow_results
                )
                diagram = files["png"].name
            except DiagramError as err:
                print(f"review: {err}", file=sys.stderr)
                return 3
        doc = build_report(
            env,
            stacks,
            cost=estimate(stacks, prices, on=args.date),
            prices=prices,
            comparison=comparison,
            diagram=diagram,
            flows=flow_results,
            config=config,
            documents=documents,
            images=images,
            images_unavailable=images_unavailable,
        )
        (out / f"{env}.md").write_text(doc.markdown())
        (out / f"{env}.html").write_text(doc.html())
        written = [f"{env}.md", f"{env}.html"] + (
            [f"architecture-{env}.png", f"architecture-{env}.svg"] if diagram else []
        )
        summary = f"review: {env}: " + ", ".join(str(out / w) for w in written)
        if comparison is not None:
            summary += (
                f" | vs {args.compare}: +{len(comparison.of('added'))} -{len(comparison.of('removed'))} "
                f"~{len(comparison.of('replaced'))} replaced, cost {comparison.cost_delta:+,.2f}/month"
            )
        print(summary)
    return finish(broken, rejected, missing_images, left_out)


def finish(broken: list[str], rejected: list[str], missing_images: list[str], left_out: list[str]) -> int:
    """The problems on stderr, then, as the LAST line of the output, what a report left out (an
    empty chart cache: the images section), so a review that exits 0 without it is not mistaken
    for a whole one; the exit code."""
    for line in broken + rejected + missing_images:
        print(line, file=sys.stderr)
    sys.stderr.flush()
    if left_out:
        print(
            "; ".join(left_out)
            + " (INCOMPLETE: fill the chart cache, e.g. `make review` with the shared folder, and run it again)"
        )
    return 5 if rejected or missing_images else 4 if broken else 0


def config_for(env: str, stacks: list[Stack]) -> EnvironmentConfig | None:
    """The environment config whose Environment tag (or name), account and region match ``env``'s
    stacks; None when no config under config/ describes them (then no flow is checked)."""
    from config import ConfigError
    from config.loader import known_environments
    from manifests.check import load_checked

    accounts = {(s.account, s.region) for s in stacks}
    for name in known_environments():
        try:
            config = load_checked(name)
        except ConfigError:
            continue
        if env in (name, config.tags.as_dict().get("Environment")) and accounts == {(config.account, config.region)}:
            return config
    print(no_environment_note(env, accounts))
    return None


def no_environment_note(env: str, accounts: set[tuple[str, str]]) -> str:
    """What it means that no config describes ``env``'s stacks (the delivery pipeline's own stack, or
    stacks of an environment whose file is not under config/): a note, not an error."""
    where = ", ".join(f"account {a} in {r}" for a, r in sorted(accounts))
    return (
        f"review: {env}: report without the flow checks: no config/NAME.yaml describes these stacks "
        f"({where}), and flows are checked per environment (each environment's own report has them)"
    )


if __name__ == "__main__":
    sys.exit(main())
