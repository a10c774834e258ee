"""The workloads image: what ``cdk deploy`` builds from ``workloads/Dockerfile``, and its URI.

The CDK app publishes the image as a ``DockerImageAsset`` (constructs/workloads_image.py) into
the environment's CDK bootstrap repository, tagged with the asset's source hash. That hash is a
pure function of the build context's files, so the renderers of a checkout (synth, ``python -m
manifests render``) compute the same URI here from the checkout, with aws-cdk-lib's own algorithm
(``FileSystem.fingerprint`` in Docker ignore mode, ``aws-ecr-assets``' extra hash); at synth the
construct checks that the asset's hash equals this one, and a test checks the port against
aws-cdk-lib on tricky trees (symlinks, CRLF, binary, split UTF-8).

The build context is always a checkout (``cdk.json``, ``.dockerignore``, ``workloads/Dockerfile``):
an installed ``hpray`` never hashes the site-packages folder it runs from. What an environment
deployed is written into its cluster (the ConfigMap :data:`DEPLOYED_CONFIGMAP`, by the cluster
stack); ``hpray submit`` reads it there, and a dry run says where its image came from.

It stays one module: the URI, the build context it hashes and the port of aws-cdk-lib's
fingerprint are one contract with the synth check (constructs/workloads_image.py), changed together.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
# The build context is the repository root (the image needs `workloads` and `config`); its
# .dockerignore keeps everything else out.
DOCKERFILE = "workloads/Dockerfile"
# HyperPod GPU instances are x86_64; a build on an arm64 laptop must still produce amd64.
PLATFORM = "linux/amd64"
# aws-cdk-lib's DefaultStackSynthesizer: the bootstrap qualifier and its container repository.
CDK_QUALIFIER = "hnb659fds"
# The aws-ecr-assets invalidation version aws-cdk-lib 2.275.0 mixes into every image hash
# (`extraHash.version` in aws-ecr-assets/lib/image-asset.js); the synth check catches a change.
ECR_ASSETS_HASH_VERSION = "1.21.0"


# The ConfigMap of the workloads namespace the cluster stack writes: the URI of the image
# `cdk deploy` pushed (stacks/cluster_stack.py); `hpray submit` runs it.
DEPLOYED_CONFIGMAP = "hpray-workloads-image"
DEPLOYED_KEY = "uri"


class ImageError(Exception):
    """The workloads image cannot be named (no build context, unsupported file)."""


def is_checkout(root: Path) -> bool:
    """A checkout of this repository: the CDK app and the image's build context (not an installed copy)."""
    return all((root / marker).is_file() for marker in ("cdk.json", ".dockerignore", DOCKERFILE))


def checkout_root(start: Path | None = None) -> Path | None:
    """The checkout whose files ``cdk deploy`` would build: this module's own when it runs from
    one, else the nearest one at or above ``start`` (default: the current folder); None outside one."""
    if is_checkout(REPO_ROOT):
        return REPO_ROOT
    here = (start or Path.cwd()).resolve()
    return next((d for d in (here, *here.parents) if is_checkout(d)), None)


def deployed_config_map(uri: str, namespace: str) -> dict[str, Any]:
    """The ConfigMap naming the image this environment deployed (what ``hpray`` reads)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": DEPLOYED_CONFIGMAP,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "cdk", "app.kubernetes.io/part-of": "hpray"},
        },
        "data": {DEPLOYED_KEY: uri},
    }


def repository_name(account: str, region: str) -> str:
    return f"cdk-{CDK_QUALIFIER}-container-assets-{account}-{region}"


def registry(account: str, region: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{suffix}"


def extra_hash() -> str:
    """The JSON aws-ecr-assets hashes beside the files for our props (file, platform)."""
    return json.dumps(
        {"file": DOCKERFILE, "platform": {"platform": PLATFORM}, "version": ECR_ASSETS_HASH_VERSION},
        separators=(",", ":"),
    )


def asset_hash(root: Path | str = REPO_ROOT) -> str:
    """The DockerImageAsset source hash (= image tag) of the build context at ``root``."""
    root = Path(root)
    if not (root / DOCKERFILE).is_file():
        raise ImageError(
            f"the workloads image's Dockerfile is not at {root / DOCKERFILE}; render "
            "from a checkout of this repository or set training.image/inference.image"
        )
    if root.resolve() == REPO_ROOT and not is_checkout(REPO_ROOT):
        raise ImageError(
            f"{REPO_ROOT} is an installed copy, not a checkout: the image cdk deploy pushed is not a hash of its files"
        )
    return _asset_hash_cached(str(root.resolve()), _context_signature(root))


@functools.cache
def _asset_hash_cached(root: str, _signature: tuple[object, ...]) -> str:
    return fingerprint(root, exclude=docker_excludes(Path(root)), extra_hash=extra_hash())


def _context_signature(root: Path) -> tuple[object, ...]:
    # Cheap cache key: the .dockerignore and the mtimes of the two copied trees' directories.
    parts: list[object] = [(root / ".dockerignore").read_bytes() if (root / ".dockerignore").exists() else b""]
    for top in ("workloads", "config"):
        for d, _, files in os.walk(root / top):
            parts.append((d, tuple(sorted((f, os.stat(os.path.join(d, f)).st_mtime_ns) for f in files))))
    return tuple(parts)


def image_uri(account: str, region: str, root: Path | str | None = None) -> str:
    """The URI ``cdk deploy`` pushes the workloads image to for this account and region, built
    from ``root`` (default: :func:`checkout_root`)."""
    if root is None:
        root = checkout_root()
        if root is None:
            raise ImageError(
                "no checkout of this repository here to compute it from (an installed hpray reads the "
                f"deployed image from the cluster's ConfigMap {DEPLOYED_CONFIGMAP})"
            )
    return f"{registry(account, region)}/{repository_name(account, region)}:{asset_hash(root)}"


def docker_excludes(root: Path) -> list[str]:
    """The exclude list aws-ecr-assets builds: .dockerignore's lines, then the files it keeps.

    (It also appends the cloud assembly's absolute path, which never matches inside the context.)
    """
    lines: list[str] = []
    ignore = root / ".dockerignore"
    if ignore.exists():
        lines = [line for line in ignore.read_text().split("\n") if line]
        lines.append("!.dockerignore")
    return [*lines, "!" + posixpath.basename(DOCKERFILE)]


# --- aws-cdk-lib's FileSystem.fingerprint (core/lib/fs), Docker ignore mode --------------------


def _js_dirname(p: str) -> str:
    """Node's path.dirname: trailing slashes dropped first, '' becomes '.'."""
    stripped = p.rstrip("/") or ("/" if p.startswith("/") else "")
    return posixpath.dirname(stripped) or ("/" if stripped.startswith("/") else ".")


def _clean(p: str) -> str:
    """@balena/dockerignore cleanPath: Node's path.normalize, then no trailing slash."""
    if p == "":
        return "."
    out = posixpath.normpath(p)
    if p.startswith("//") and not p.startswith("///"):
        out = "/" + out.lstrip("/")  # Node collapses a leading '//', Python keeps it
    return out


class _Rule:
    def __init__(self, pattern: str, negative: bool) -> None:
        self.pattern = pattern
        self.negative = negative
        self.dirs = pattern.split("/")
        self.regexp = re.compile(self._regex(pattern), re.IGNORECASE)

    @staticmethod
    def _regex(p: str) -> str:
        out, i = "^", 0
        while i < len(p):
            ch = p[i]
            if ch == "*":
                if i + 1 < len(p) and p[i + 1] == "*":
                    i += 1
                    if i + 1 < len(p) and p[i + 1] == "/":
                        i += 1
                    out += ".*" if i + 1 >= len(p) else "(.*/)?"
                else:
                    out += "[^/]*"
            elif ch == "?":
                out += "[^/]"
            elif ch in ".$":
                out += "\\" + ch
            elif ch == "\\":
                if i + 1 < len(p):
                    out += "\\" + p[i + 1]
                    i += 1
                else:
                    out += "\\\\"
            else:
                out += ch
            i += 1
        return out + r"\Z"


class _DockerIgnore:
    """@balena/dockerignore 1.0.2 (the matcher aws-cdk-lib uses), POSIX paths."""

    def __init__(self) -> None:
        self.rules: list[_Rule] = []

    def add(self, pattern: str) -> None:
        if not pattern or pattern.startswith("#") or pattern.strip() == "":
            return
        p = pattern.strip()
        negative = False
        if p[0] == "!":
            negative, p = True, p[1:].strip()
        if p:
            p = _clean(p)
            if len(p) > 1 and p[0] == "/":
                p = p[1:]
        if negative:
            p = "!" + p
        p = p.strip()
        if not p:
            return
        p = _clean(p)
        if p[0] == "!":
            if len(p) == 1:
                return
            negative, p = True, p[1:]
        else:
            negative = False
        self.rules.append(_Rule(p, negative))

    def ignores(self, file: str) -> bool:
        if not file:
            return True
        parent = _clean(_js_dirname(file))
        parent_dirs = parent.split("/")
        matched = False
        for rule in self.rules:
            match = bool(rule.regexp.match(file))
            if not match and parent != ".":
                if "**" in rule.dirs:
                    for i in range(len([d for d in rule.dirs if d != "**"]), len(parent_dirs) + 1):
                        match = match or bool(rule.regexp.match("/".join(parent_dirs[:i])))
                elif len(rule.dirs) <= len(parent_dirs):
                    match = bool(rule.regexp.match("/".join(parent_dirs[: len(rule.dirs)])))
            if match:
                matched = not rule.negative
        return matched


_NEGATIVE = re.compile(r"^\s*(!|/!)(.*)")


class _DockerIgnoreStrategy:
    def __init__(self, root: str, patterns: list[str]) -> None:
        self.root = root
        self.ignore, self.complete = _DockerIgnore(), _DockerIgnore()
        for p in patterns:
            self.ignore.add(p)
            self.complete.add(p)
            m = _NEGATIVE.match(p)
            if m:
                d = m.group(2)
                while True:
                    d = _js_dirname(d)
                    if d in ("/", "."):
                        break
                    self.complete.add(m.group(1) + d)

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root) if path != self.root else ""

    def ignores(self, path: str) -> bool:
        return self.ignore.ignores(self._rel(path))

    def completely_ignores(self, path: str) -> bool:
        rel = self._rel(path)
        return self.ignore.ignores(rel) and self.complete.ignores(rel)


def _field(h: Any, header: str, value: str) -> None:
    h.update(b"\x01" + header.encode() + b"\x02" + value.encode() + b"\x03")


def content_fingerprint(path: str) -> str:
    """aws-cdk-lib's contentFingerprint: text read in 8 KiB chunks with CRLF as LF."""
    h = hashlib.sha256()
    size, binary, last = 0, False, ""
    with open(path, "rb") as f:
        while chunk := f.read(8 * 1024):
            if size == 0:
                binary = b"\0" in chunk
            if binary:
                size += len(chunk)
                h.update(chunk)
                continue
            text = chunk.decode("utf-8", errors="replace")
            if text.endswith("\r"):
                last += text
                continue
            data, last = (last + text).replace("\r\n", "\n").encode(), ""
            size += len(data)
            h.update(data)
    if last:
        h.update(last.encode())
    return f"{size}:{h.hexdigest()}"


def _realpath_or_self(p: str) -> str:
    try:
        return os.path.realpath(p, strict=True)
    except OSError:
        return p


def fingerprint(directory: str | Path, *, exclude: list[str], extra_hash: str | None = None) -> str:
    """aws-cdk-lib 2.275.0 ``FileSystem.fingerprint(directory, {exclude, extraHash,
    ignoreMode: DOCKER})`` with the default symlink mode (follow links that leave the tree)."""
    h = hashlib.sha256()
    _field(h, "options.extra", extra_hash or "")
    _field(h, "options.follow", "external")
    root = os.path.realpath(directory)
    _field(h, "options.ignoreMode", "docker")
    # AssetStaging puts this name first in every asset's excludes.
    strategy = _DockerIgnoreStrategy(root, [".is_custom_resource", *exclude])
    ancestors: set[str] = set()

    def key(p: str) -> str:
        return os.path.relpath(p, root)

    def on_file(sym: str, real: str) -> None:
        _field(h, f"file:{key(sym)}", content_fingerprint(real))

    def walk(sym: str, real: str, canonical: str) -> None:
        if canonical in ancestors:
            return
        ancestors.add(canonical)
        for entry in sorted(os.scandir(real), key=lambda e: e.name):
            child, child_real = os.path.join(sym, entry.name), os.path.join(real, entry.name)
            if entry.is_symlink():
                visit_link(child, child_real)
            elif entry.is_dir(follow_symlinks=False):
                visit_dir(child, child_real, os.path.join(canonical, entry.name))
            elif entry.is_file(follow_symlinks=False) and not strategy.ignores(child):
                on_file(child, child_real)
        ancestors.discard(canonical)

    def visit_dir(sym: str, real: str, canonical: str) -> None:
        if not strategy.completely_ignores(sym):
            walk(sym, real, canonical)

    def visit_link(sym: str, real: str) -> None:
        target = os.readlink(real)
        resolved = os.path.normpath(target if os.path.isabs(target) else os.path.join(os.path.dirname(real), target))
        resolved = os.path.join(_realpath_or_self(os.path.dirname(resolved)), os.path.basename(resolved))
        internal = resolved == root or resolved.startswith(root + os.sep)
        st = None
        if not internal:
            try:
                st = os.stat(resolved)
            except OSError:
                st = None
        if st is None:
            if not strategy.ignores(sym):
                value = key(resolved) if internal and os.path.isabs(target) else target
                _field(h, f"link:{key(sym)}", value)
            return
        import stat as stat_mod

        if stat_mod.S_ISDIR(st.st_mode):
            visit_dir(sym, resolved, _realpath_or_self(resolved))
        elif stat_mod.S_ISREG(st.st_mode):
            if not strategy.ignores(sym):
                on_file(sym, resolved)
        elif not strategy.ignores(sym):
            raise ImageError(f"Unable to hash {sym}: it is neither a file nor a directory")

    walk(root, root, _realpath_or_self(root))
    return h.hexdigest()


def context_files(root: Path | str = REPO_ROOT) -> list[str]:
    """Relative paths of the files the build context sends (what COPY can see)."""
    root_s = os.path.realpath(root)
    strategy = _DockerIgnoreStrategy(root_s, [".is_custom_resource", *docker_excludes(Path(root_s))])
    out: list[str] = []
    for d, dirs, files in os.walk(root_s):
        dirs[:] = sorted(x for x in dirs if not strategy.completely_ignores(os.path.join(d, x)))
        out += [
            os.path.relpath(os.path.join(d, f), root_s)
            for f in sorted(files)
            if not strategy.ignores(os.path.join(d, f))
        ]
    return out


def resolve(cfg: EnvironmentConfig, override: str | None, field: str) -> str:
    """``override`` (``training.image``/``inference.image``) or the environment's workloads image.

    Never the bare Ray image: it has neither torch nor this code. Raises ConfigError naming
    ``field`` when the image cannot be named.
    """
    if override:
        return override
    try:
        return image_uri(cfg.account, cfg.region)
    except ImageError as err:
        from config import ConfigError

        raise ConfigError(f"{cfg.name}.yaml", [f"{field}: not set, and {err}"]) from None


def source_of(cfg: EnvironmentConfig, override: str | None, field: str) -> str:
    """Where :func:`resolve` took the image from, for a dry run that reached no cluster."""
    if override:
        return f"image: {field} of {cfg.name}.yaml"
    root = checkout_root()
    if root is None:
        return "image: no checkout here and no cluster reached"
    return f"image: computed from the checkout at {root} (no cluster reached; a submit runs the one in ConfigMap {DEPLOYED_CONFIGMAP})"
