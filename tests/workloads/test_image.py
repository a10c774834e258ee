"""The workloads image: one URI from synth, `python -m manifests render` and `ops`, the hash port
against aws-cdk-lib itself, the Dockerfile (hadolint, base, user, digest slots), the pins against
requirements.lock, and what the build context holds."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from config import ConfigError, load_environment
from manifests import image, k8s

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / image.DOCKERFILE
ENVS = ("dev", "staging", "prod")


def _cdk_hashes(trees: list[tuple[Path, str]]) -> list[str]:
    """aws-cdk-lib's own DockerImageAsset hashes for (context, dockerfile) pairs, one App."""
    import tempfile

    import aws_cdk as cdk
    from aws_cdk import IgnoreMode
    from aws_cdk import aws_ecr_assets as ecr_assets

    app = cdk.App(outdir=tempfile.mkdtemp())
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="us-east-1"))
    return [
        ecr_assets.DockerImageAsset(
            stack,
            f"A{i}",
            directory=str(d),
            file=f,
            platform=ecr_assets.Platform.LINUX_AMD64,
            ignore_mode=IgnoreMode.DOCKER,
        ).asset_hash
        for i, (d, f) in enumerate(trees)
    ]


def _tricky_tree(root: Path) -> Path:
    (root / "workloads" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "workloads" / "Dockerfile").write_text("FROM scratch\r\nCOPY . /x\r\n")
    (root / "workloads" / "pkg" / "a.py").write_text("x = 1\r\n" * 3000)  # CRLF across chunks
    # A two-byte UTF-8 character split by the 8 KiB chunk boundary, and a chunk ending in CR.
    (root / "workloads" / "pkg" / "utf.py").write_bytes(b"#" * 8191 + "é".encode() + b"\n" + b"y" * 8191 + b"\r\nz")
    (root / "workloads" / "pkg" / "blob.bin").write_bytes(bytes(range(256)) * 100)
    (root / "workloads" / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0cache")
    (root / "workloads" / "pkg" / "notes.md").write_text("not copied\n")
    (root / "tests").mkdir()
    (root / "tests" / "t.py").write_text("no\n")
    (root / "Dockerfile").write_text("root dockerfile\n")
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "ext.py").write_text("external = True\n")
    os.symlink(outside / "ext.py", root / "workloads" / "pkg" / "ext.py")  # followed (external)
    os.symlink("a.py", root / "workloads" / "pkg" / "alias.py")  # kept as a link (internal)
    (root / ".dockerignore").write_text(
        "*\n!workloads/**/*.py\n!workloads/Dockerfile\n"
        "workloads/**/__pycache__\n# comment\n\n !workloads/pkg/blob.bin\n"
    )
    return root


def test_hash_port_equals_aws_cdk_lib(tmp_path):
    tree = _tricky_tree(tmp_path / "ctx")
    cdk_tricky, cdk_repo = _cdk_hashes([(tree, "workloads/Dockerfile"), (ROOT, image.DOCKERFILE)])
    assert image.asset_hash(tree) == cdk_tricky
    assert image.asset_hash(ROOT) == cdk_repo
    # The port sees what aws-cdk-lib sees: a changed copied file changes the tag, an ignored one not.
    (tree / "tests" / "t.py").write_text("changed\n")
    (tree / "workloads" / "pkg" / "notes.md").write_text("changed\n")
    assert image.asset_hash(tree) == cdk_tricky
    (tree / "workloads" / "pkg" / "a.py").write_text("x = 2\n")
    assert image.asset_hash(tree) != cdk_tricky
    assert image.asset_hash(tree) == _cdk_hashes([(tree, "workloads/Dockerfile")])[0]


def _rendered_images(manifest: dict) -> set[str]:
    found: set[str] = set()

    def walk(v):
        if isinstance(v, dict):
            if isinstance(v.get("image"), str):
                found.add(v["image"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(manifest)
    return found


def _cli_render(kind: str, env: str) -> dict:
    from manifests.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["render", kind, "--env", env]) == 0
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("env", ENVS)
def test_synth_render_and_ops_name_the_same_uri(env, synthesized):
    from ops.submit import render as ops_render

    assembly, config, stacks = synthesized(env)
    # What cdk deploy pushes: the asset manifest's destination for the workloads image.
    stack = assembly.get_stack_by_name(stacks.cluster.stack_name)
    manifest = json.loads(Path(assembly.directory, f"{stack.stack_name}.assets.json").read_text())
    # The workloads image (closed networks also publish the NVIDIA device plugin as an asset).
    (asset,) = [a for a in manifest["dockerImages"].values() if a["source"].get("dockerFile") == image.DOCKERFILE]
    assert asset["source"]["platform"] == image.PLATFORM
    (dest,) = asset["destinations"].values()
    pushed = f"{image.registry(config.account, config.region)}/{dest['repositoryName']}:{dest['imageTag']}"
    pushed = pushed.replace("${AWS::AccountId}", config.account).replace("${AWS::Region}", config.region)
    assert pushed == stacks.cluster.workloads_image.image_uri == image.image_uri(config.account, config.region)
    outputs = stacks.cluster.node.find_child("WorkloadsImage").node.find_child("Uri")
    assert outputs is not None
    for kind in ("training", "inference"):
        assert _rendered_images(_cli_render(kind, env)) == {pushed}
        assert _rendered_images(ops_render.render(kind, config)) == {pushed}


def test_no_bare_ray_image_in_any_rendered_manifest():
    for env in ENVS:
        for kind in ("training", "inference"):
            text = yaml.safe_dump(_cli_render(kind, env))
            assert "rayproject/" not in text


def test_image_override_wins_and_a_missing_context_is_a_config_error(tmp_path, monkeypatch):
    from manifests.training import render

    cfg = load_environment("dev")
    over = cfg.model_copy(update={"training": cfg.training.model_copy(update={"image": "reg/x:1"})})
    assert _rendered_images(render(over)) == {"reg/x:1"}
    monkeypatch.setattr(image, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(image.image_uri, "__defaults__", (tmp_path,))
    with pytest.raises(ConfigError) as err:
        render(cfg)
    text = err.value.render()
    assert "training.image: not set, and the workloads image's Dockerfile is not at" in text
    assert "set training.image/inference.image" in text


# --- The Dockerfile ----------------------------------------------------------------------------


def test_hadolint_is_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S*)$", DOCKERFILE.read_text(), re.M))


def test_base_is_the_pinned_ray_release_and_digest_slots_are_well_formed():
    args = _args()
    repo, tag = args["RAY_BASE"].split(":")
    assert repo == "rayproject/ray"
    assert tag == f"{k8s.RAY_VERSION}-py{sys.version_info.major}{sys.version_info.minor}-cu128"
    assert re.fullmatch(r'(""|@sha256:[0-9a-f]{64})', args["RAY_BASE_DIGEST"])
    assert re.fullmatch(r'(""|[0-9a-f]{64})', args["EFA_INSTALLER_SHA256"])
    assert re.fullmatch(r"[0-9a-f]{128}", args["AWS_OFI_NCCL_SHA512"])
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    assert froms == ["${RAY_BASE}${RAY_BASE_DIGEST}"] * 2


def test_runs_as_the_non_root_ray_user():
    text = DOCKERFILE.read_text()
    final = text[text.rindex("\nFROM ") :]
    users = re.findall(r"^USER (\S+)", final, re.M)
    assert users[-1] == "1000:100"
    assert all(c == "--chown=1000:100" for c in re.findall(r"^COPY (--chown=\S+) (?:config|workloads)", final, re.M))


def test_the_final_stage_installs_the_trust_store_the_gcs_checks_its_store_against():
    """GCS fault tolerance: the head's GCS verifies ElastiCache's certificate against the default
    trust store (tests/workloads/inference/test_gcs_store_tls.py); the image must carry it."""
    text = DOCKERFILE.read_text()
    final = text[text.rindex("\nFROM ") :]
    installs = re.findall(r"apt-get install -y --no-install-recommends ([^\\&]+)", final)
    assert ["ca-certificates"] in [i.split() for i in installs]


def _runtime_closure() -> dict[str, str]:
    roots = [
        ("ray", {"default", "train", "serve"}),
        ("torch", set()),
        ("torchao", set()),
        ("pyarrow", set()),
        ("boto3", set()),
        ("pydantic", set()),
        ("PyYAML", set()),
    ]
    env = {**default_environment(), "platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux"}
    seen: dict[str, set[str]] = {}

    def visit(name: str, extras: set[str]) -> None:
        key = canonicalize_name(name)
        if key in seen and extras <= seen[key]:
            return
        seen[key] = seen.get(key, set()) | extras
        for spec in metadata.distribution(name).requires or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras}):
                visit(req.name, set(req.extras))

    for name, extras in roots:
        visit(name, extras)
    seen.pop("setuptools", None)  # the interpreter's own, as in the base image
    return {k: metadata.version(k) for k in seen}


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[canonicalize_name(name)] = version
    return out


def test_image_packages_are_the_lock_versions_of_the_runtime_closure():
    image_pins = _pins(ROOT / "workloads" / "image-requirements.txt")
    lock = _pins(ROOT / "requirements.lock")
    closure = _runtime_closure()
    assert set(image_pins) == set(closure)
    for name, version in image_pins.items():
        # torch: the lock holds the CPU build (2.13.0+cpu), the image the same release's CUDA build.
        assert Version(version).public == Version(lock[name]).public, name
        assert Version(version).local is None or name != "torch"
    assert image_pins["ray"] == k8s.RAY_VERSION


# --- The build context -------------------------------------------------------------------------


def test_context_holds_only_what_runs_on_the_cluster():
    files = image.context_files()
    assert "workloads/Dockerfile" in files and "workloads/image-requirements.txt" in files
    for f in files:
        assert f.startswith(("workloads/", "config/")) or f == ".dockerignore", f
        assert not f.startswith(("tests/", "bench/", "rigs/_offline/")), f
        assert not f.endswith((".pyc", ".yaml")), f
    # workloads/ is runtime only: it comes back whole, and no renderer is in it (they are in manifests/).
    ignore = [li.strip() for li in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "!workloads/**" in ignore
    assert not [li for li in ignore if li.startswith(("workloads/", "manifests/", "!manifests"))]
    # No list of excluded files: the image is folders (config's own modules, workloads/ whole).
    assert not [li for li in ignore if li.endswith(".py") and "*" not in li], "a file named in .dockerignore"
    assert not [f for f in files if f.startswith(("sizing/", "config/facts/"))]
    assert not [f for f in files if f.startswith("manifests/")]
    for harness in (
        "rigs/local_cluster.py",
        "rigs/rehearse_train.py",
        "rigs/rehearse_serve.py",
        "rigs/rehearse_serve_ha.py",
        "rigs/loadtest.py",
        "rigs/_offline/sitecustomize.py",
        "manifests/training.py",
        "manifests/inference.py",
        "manifests/network_policy.py",
    ):
        assert (ROOT / harness).exists() and harness not in files


def test_every_workloads_module_the_image_ships_runs_on_the_cluster():
    """The renderers and generators run at deploy time (cdk synth, hpray) and stay out of the
    image: each module it holds is one the RayJob's entrypoint or the Serve app imports."""
    from manifests import serve_config

    files = set(image.context_files())
    roots = _registry_entrypoints()
    assert {"workloads.training.__main__", serve_config.IMPORT_PATH.split(":")[0]} <= set(roots)
    todo, used = list(roots), set()
    while todo:
        m = todo.pop()
        f = _module_file(m, files)
        if f is None or f in used:
            continue
        used.add(f)
        todo += sorted(_local_imports(ROOT / f))
    packages = {f for f in files if f.endswith("__init__.py")}
    shipped = {f for f in files if f.endswith(".py")}
    assert shipped - packages == used - packages


def _registry_entrypoints() -> list[str]:
    """What runs on the cluster, per registered workload (manifests/registry.py) as rendered for
    every environment: a RayJob's ``python -m`` module, a RayService's Serve import paths."""
    from manifests import registry

    roots: list[str] = []
    for env in ENVS:
        cfg = load_environment(env)
        for w, _ in registry.deployed(cfg):
            manifest = w.render(cfg)
            if w.kind == "RayJob":
                roots.append(re.match(r"python -m (\S+)", manifest["spec"]["entrypoint"]).group(1) + ".__main__")
                continue
            for app in yaml.safe_load(manifest["spec"]["serveConfigV2"])["applications"]:
                roots.append(app["import_path"].split(":")[0])
    return sorted({r for r in roots if r.split(".")[0] == "workloads"})


def _local_imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module)
            mods |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in mods if m.split(".")[0] in ("workloads", "config", "sizing")}


def _module_file(mod: str, files: set[str]) -> str | None:
    base = mod.replace(".", "/")
    for cand in (f"{base}.py", f"{base}/__init__.py"):
        if cand in files:
            return cand
    return None


def test_entrypoints_and_serve_import_paths_exist_in_the_image():
    from manifests import serve_config
    from manifests import training as train_manifest

    files = set(image.context_files())
    copied = set(re.findall(r"^COPY --chown=\S+ (\S+) /home/ray/app/", DOCKERFILE.read_text(), re.M))
    assert copied == {"config", "workloads"}
    in_image = {f for f in files if f.split("/")[0] in copied}
    entry = train_manifest.render(load_environment("prod"))["spec"]["entrypoint"]
    module = re.match(r"python -m (\S+) ", entry).group(1)
    roots = [module + ".__main__"]
    mod, attr = serve_config.IMPORT_PATH.split(":")
    tree = ast.parse((ROOT / (_module_file(mod, in_image) or "missing")).read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert attr in defined
    roots.append(mod)
    # Every module these import (transitively) from this repository is in the image.
    todo, seen = list(roots), set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        f = _module_file(m, in_image)
        if f is None:
            parent = m.rsplit(".", 1)[0]
            assert _module_file(parent, in_image), f"{m} (imported at runtime) is not in the image"
            continue
        todo += sorted(_local_imports(ROOT / f))


@pytest.mark.parametrize("kind", ["training", "inference", "inference-llm"])
def test_rendered_yaml_has_no_anchors_or_aliases(kind):
    from manifests.__main__ import main

    for env in ENVS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["render", kind, "--env", env])
        if code != 0:
            continue  # inference-llm is not enabled in every environment
        events = list(yaml.parse(out.getvalue()))
        assert not [e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]
        assert "VLLM_USE_V1" not in out.getvalue()


def test_the_efa_installer_is_verified_against_awss_signing_key_before_use():
    """The installer tarball is checked, unconditionally, against AWS's detached signature, and the
    signature must come from the key whose fingerprint the EC2 user guide publishes."""
    text = DOCKERFILE.read_text()
    assert _args()["EFA_INSTALLER_GPG_FINGERPRINT"] == "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"
    run = text[text.index("RUN apt-get update") : text.index("WORKDIR /tmp/efa/aws-efa-installer")]
    verify = run.index('gpg --batch --status-fd 1 --verify "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz.sig"')
    assert run.index('| grep -q "^\\[GNUPG:\\] VALIDSIG .*${EFA_INSTALLER_GPG_FINGERPRINT}"') > verify
    assert verify < run.index('tar -xzf "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"')
    # Not behind a condition: only the optional sha256 is.
    line = next(li for li in run.splitlines() if "--verify" in li)
    assert not line.lstrip(" &").startswith("if ")


def test_the_signature_check_fails_closed(tmp_path):
    """The Dockerfile's check, run with a real gpg on a throwaway key: a good signature by the pinned
    key passes; the same tarball changed, or signed by another key, fails."""
    import shutil

    gpg = shutil.which("gpg")
    assert gpg is not None, "make test installs gnupg (Makefile APT_PACKAGES)"
    text = DOCKERFILE.read_text()
    run = text[text.index("RUN apt-get update") : text.index("WORKDIR /tmp/efa/aws-efa-installer")]
    start = run.index("gpg --batch --status-fd 1 --verify")
    check = run[start : run.index("\n && if [ -n", start)].replace("\\\n", " ").strip().rstrip("\\")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}

    def key(name: str) -> str:
        subprocess.run(
            [gpg, "--batch", "--passphrase", "", "--quick-gen-key", name, "rsa2048", "sign", "never"],
            env=env,
            capture_output=True,
            check=True,
        )
        out = subprocess.run(
            [gpg, "--batch", "--with-colons", "--fingerprint", name], env=env, capture_output=True, text=True
        )
        return next(li.split(":")[9] for li in out.stdout.splitlines() if li.startswith("fpr:"))

    pinned, other = key("pinned <p@example.com>"), key("other <o@example.com>")
    tarball = tmp_path / "aws-efa-installer-9.9.9.tar.gz"
    tarball.write_bytes(b"installer")

    def sign(uid: str) -> None:
        sig = tmp_path / f"{tarball.name}.sig"
        sig.unlink(missing_ok=True)
        subprocess.run(
            [gpg, "--batch", "-u", uid, "--detach-sign", "-o", str(sig), str(tarball)],
            env=env,
            check=True,
            capture_output=True,
        )

    def verify() -> int:
        script = f"set -o pipefail; {check}"
        run_env = {**env, "EFA_INSTALLER_VERSION": "9.9.9", "EFA_INSTALLER_GPG_FINGERPRINT": pinned}
        return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=run_env, capture_output=True).returncode

    sign(pinned)
    assert verify() == 0
    tarball.write_bytes(b"installer, changed")
    assert verify() != 0
    tarball.write_bytes(b"installer")
    sign(other)
    assert other != pinned and verify() != 0
