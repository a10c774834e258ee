"""The EKS add-on builds config/versions.py pins against the builds EKS offers for a Kubernetes
minor (``eks:DescribeAddonVersions``): ``preflight`` checks the environment's version, ``upgrade
plan --apply`` the target's.

EKS refuses a build it does not offer for the cluster's minor at ``CreateAddon``/``UpdateAddon``,
after the cluster and its node group are up, and CloudFormation rolls the cluster stack back: the
check runs before the deploy instead. Gathering (:func:`offered_builds`, one paginated call) is
apart from judging (:func:`evaluate_addon_builds`, pure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ops.reports.checks import FAIL, PASS, Check

_BUILD_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-eksbuild\.(\d+))?")


@dataclass(frozen=True)
class Offered:
    """The builds EKS offers of one add-on for one Kubernetes minor, newest first, and its default."""

    builds: tuple[str, ...]
    default: str | None


def build_key(build: str) -> tuple[int, ...]:
    """Order of add-on builds: ``v1.20.3-eksbuild.2`` after ``v1.20.3-eksbuild.1`` after ``v1.19.9``."""
    m = _BUILD_RE.match(build)
    return tuple(int(g or 0) for g in m.groups()) if m else (-1,)


def parse_offered(addons: list[dict[str, Any]], kubernetes_version: str) -> dict[str, Offered]:
    """DescribeAddonVersions' ``addons`` (asked for ``kubernetesVersion``) as :class:`Offered` per
    add-on name. A build whose ``compatibilities`` list other minors only is left out."""
    offered: dict[str, Offered] = {}
    for addon in addons:
        builds, default = [], None
        for entry in addon.get("addonVersions") or []:
            build = entry.get("addonVersion")
            compat = [c for c in entry.get("compatibilities") or [] if c.get("clusterVersion") == kubernetes_version]
            if not build or (entry.get("compatibilities") and not compat):
                continue
            builds.append(build)
            if any(c.get("defaultVersion") for c in compat):
                default = build
        name = addon.get("addonName")
        if name:
            offered[name] = Offered(tuple(sorted(set(builds), key=build_key, reverse=True)), default)
    return offered


def offered_builds(aws: Any, kubernetes_version: str) -> dict[str, Offered]:
    """What EKS offers in the region for ``kubernetes_version`` (every add-on, all pages)."""
    addons = aws.paginate("eks", "describe_addon_versions", "addons", kubernetesVersion=kubernetes_version)
    return parse_offered(addons, kubernetes_version)


def list_command(kubernetes_version: str, name: str, region: str) -> str:
    return (
        f"aws eks describe-addon-versions --kubernetes-version {kubernetes_version} --addon-name {name} "
        f"--region {region} --query 'addons[].addonVersions[].addonVersion'"
    )


LABEL = "eks add-ons"


def evaluate_addon_builds(
    kubernetes_version: str, region: str, pins: dict[str, str], offered: dict[str, Offered]
) -> list[Check]:
    """A FAIL row (``add-on NAME``) per pinned add-on whose build EKS does not offer for the
    minor, naming the pin, the builds EKS offers (newest first) and the edit of
    config/versions.py; one PASS row (``eks add-ons``) for the pins it offers."""
    failed, passed = [], []
    for name, pin in sorted(pins.items()):
        label = f"add-on {name}"
        where = f"ADDON_VERSIONS[{kubernetes_version!r}][{name!r}] in config/versions.py"
        found = offered.get(name)
        if found is None or not found.builds:
            failed.append(
                Check(
                    label,
                    FAIL,
                    f"{name} {pin} (pinned for Kubernetes {kubernetes_version}): EKS offers no build of {name} "
                    f"for Kubernetes {kubernetes_version} in {region}, so CreateAddon would fail and roll the cluster stack back",
                    f"check the add-on's name and region: {list_command(kubernetes_version, name, region)}",
                )
            )
        elif pin not in found.builds:
            move_to = found.default or found.builds[0]
            failed.append(
                Check(
                    label,
                    FAIL,
                    f"{name} {pin} (pinned for Kubernetes {kubernetes_version}) is not a build EKS offers for "
                    f"Kubernetes {kubernetes_version} in {region}, so CreateAddon would fail and roll the cluster "
                    f"stack back; EKS offers: {', '.join(found.builds)}"
                    + (f" (default {found.default})" if found.default else ""),
                    f"set {where} to {move_to} (or another offered build), then synth and deploy again",
                )
            )
        else:
            passed.append(f"{name} {pin}")
    if passed:
        everything = "every pinned build" if not failed else "these pinned builds"
        failed.append(
            Check(
                LABEL,
                PASS,
                f"EKS offers {everything} for Kubernetes {kubernetes_version} in {region}: {', '.join(passed)}",
            )
        )
    return failed
