"""``--kubeconfig`` / ``--context``: the kubeconfig a command uses instead of the environment's EKS
cluster, checked before anything is called (a missing file, bad YAML, an unknown context are
command-line errors, exit 2), and what to say when its server does not answer.

Which files: ``--kubeconfig PATH``; else ``$KUBECONFIG`` (a list, as kubectl reads it: the first
file that sets a name wins); else ``~/.kube/config``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ops.errors import KubernetesError, UsageError

DEFAULT = "~/.kube/config"


@dataclass(frozen=True)
class KubeconfigTarget:
    files: tuple[Path, ...]
    source: str  # how the files were chosen: "--kubeconfig PATH", "$KUBECONFIG", "~/.kube/config"
    context: str
    server: str

    @property
    def config_file(self) -> str:
        """For the kubernetes client: the files, joined as $KUBECONFIG joins them."""
        return os.pathsep.join(str(f) for f in self.files)

    def unreachable_fix(self) -> str:
        kubeconfig = f" --kubeconfig {self.files[0]}" if len(self.files) == 1 else ""
        return (
            f"the server {self.server} of context {self.context!r} ({self.source}) did not answer: check that "
            f"the cluster is up and the address is right (kubectl{kubeconfig} --context {self.context} "
            "cluster-info), or leave out --kubeconfig/--context to connect to the environment's EKS cluster "
            "with your AWS identity"
        )


def _update_kubeconfig(cluster: str, region: str, path: str | None = None) -> str:
    return f"aws eks update-kubeconfig --name {cluster} --region {region}" + (f" --kubeconfig {path}" if path else "")


def _files(kubeconfig: str | None, environ: Mapping[str, str]) -> tuple[list[Path], str]:
    if kubeconfig:
        return [Path(kubeconfig).expanduser()], f"--kubeconfig {kubeconfig}"
    if environ.get("KUBECONFIG"):
        return [Path(p).expanduser() for p in environ["KUBECONFIG"].split(os.pathsep) if p], "$KUBECONFIG"
    return [Path(DEFAULT).expanduser()], DEFAULT


def _load(path: Path, fix: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UsageError(f"kubeconfig {path} is not valid YAML{where}: {problem}", fix) from None
    except OSError as err:
        raise UsageError(f"kubeconfig {path} cannot be read: {err.strerror}", fix) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"kubeconfig {path} is not a kubeconfig (a mapping of clusters, users, contexts)", fix)
    return data


def _named(configs: list[dict[str, Any]], section: str) -> dict[str, dict[str, Any]]:
    """Entries of ``section`` by name; the first file that names one wins (kubectl's merge)."""
    found: dict[str, dict[str, Any]] = {}
    for data in configs:
        for entry in data.get(section) or []:
            if isinstance(entry, dict) and entry.get("name") and entry["name"] not in found:
                found[entry["name"]] = entry.get(section[:-1]) or {}
    return found


def check(
    kubeconfig: str | None,
    context: str | None,
    *,
    cluster: str,
    region: str,
    environ: Mapping[str, str] | None = None,
) -> KubeconfigTarget:
    """The kubeconfig, its context and server, or a :class:`UsageError` saying what is wrong with
    it and how to fix that; ``cluster``/``region``: the environment's EKS cluster, for the fix."""
    environ = os.environ if environ is None else environ
    files, source = _files(kubeconfig, environ)
    write_one = _update_kubeconfig(cluster, region, kubeconfig)
    existing = [f for f in files if f.is_file()]
    if kubeconfig and not existing:
        what = "is a directory" if files[0].is_dir() else "does not exist"
        raise UsageError(
            f"--kubeconfig {kubeconfig}: the file {what}",
            f"write it with `{write_one}`, or leave out --kubeconfig to connect with your AWS identity",
        )
    if not existing:
        raise UsageError(
            f"--context {context}: there is no kubeconfig to read it from ({source}: no such file)",
            f"write one with `{write_one}`, pass --kubeconfig PATH, or leave out --context to connect with "
            "your AWS identity",
        )
    configs = [
        _load(f, f"fix the file, or write it again with `{_update_kubeconfig(cluster, region, str(f))}`")
        for f in existing
    ]
    contexts = _named(configs, "contexts")
    where = existing[0] if len(existing) == 1 else source
    name = context or next((str(c["current-context"]) for c in configs if c.get("current-context")), None)
    known = f"use one of: {', '.join(sorted(contexts))}" if contexts else f"write one with `{write_one}`"
    if not name:
        raise UsageError(f"kubeconfig {where} sets no current-context", f"pick one with --context NAME; {known}")
    if name not in contexts:
        flag = "--context" if context else "current-context"
        raise UsageError(f"{flag} {name!r} is not in kubeconfig {where}", known)
    cluster_name = contexts[name].get("cluster")
    server = _named(configs, "clusters").get(str(cluster_name), {}).get("server")
    if not server:
        raise UsageError(
            f"context {name!r} of kubeconfig {where} names cluster {cluster_name!r}, which has no server there",
            f"write the cluster again with `{write_one}`",
        )
    return KubeconfigTarget(tuple(existing), source, name, str(server))


def api_client(target: KubeconfigTarget) -> Any:
    """The kubernetes ApiClient of a checked kubeconfig."""
    from kubernetes import config as kconfig

    try:
        return kconfig.new_client_from_config(config_file=target.config_file, context=target.context)
    except (kconfig.ConfigException, OSError, ValueError) as err:
        raise KubernetesError(
            f"cannot use context {target.context!r} of {target.source}: {err}",
            "check its user's credentials (certificate files, exec plugin such as `aws eks get-token`)",
        ) from None
