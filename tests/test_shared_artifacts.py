"""tests/shared_artifacts.py: the shared test folder enters the artifact cache only with the pinned
digests; a modified copy is named on one line, in `make review` and in the skip line of the tests
that need it."""

from __future__ import annotations

import shutil

import pytest

from artifacts import pinned
from config import versions
from tests import conftest, shared_artifacts

EFA = versions.CHART_SOURCES["aws-efa-k8s-device-plugin"]


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(pinned.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(pinned.OFFLINE_ENV, "1")
    pinned._FAILED.clear()
    pinned._source_dir.cache_clear()
    yield tmp_path
    pinned._FAILED.clear()
    pinned._source_dir.cache_clear()


@pytest.fixture
def modified_shared(empty_cache):
    """A shared folder whose KubeRay CRDs are the pinned ones and whose EFA chart is not."""
    real = shared_artifacts.shared_folder() / versions.KUBERAY_CRDS.folder
    if not real.is_dir():
        pytest.skip(f"no shared test folder at {real.parent}: this test copies its KubeRay CRDs")
    shared = empty_cache / "shared"
    shutil.copytree(real, shared / versions.KUBERAY_CRDS.folder)
    (shared / "charts" / EFA.folder).mkdir(parents=True)
    (shared / "charts" / EFA.folder / "Chart.yaml").write_text("name: x\n")
    return shared


def test_the_pinned_copies_are_cached_and_a_modified_one_is_refused(modified_shared, empty_cache):
    refused = shared_artifacts.seed_cache(modified_shared)
    assert [str(e) for e in refused] == [
        f"missing {EFA.folder} at aws/eks-charts@de5fdc1: {modified_shared}/charts/{EFA.folder} has digest "
        f"{pinned.tree_digest(modified_shared / 'charts' / EFA.folder)}, config/versions.py pins {EFA.digest}; "
        "replace that folder with the pinned one or fix the pin"
    ]
    assert pinned.tree_digest(pinned.kuberay_crd_dir(), versions.KUBERAY_CRDS.files) == versions.KUBERAY_CRDS.digest
    with pytest.raises(pinned.ArtifactUnavailable):
        pinned.chart_dir("aws-efa-k8s-device-plugin")


def test_make_review_stops_on_a_modified_copy_with_one_line(modified_shared, capsys):
    assert shared_artifacts.main([str(modified_shared)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"tests.shared_artifacts: missing {EFA.folder} at aws/eks-charts@de5fdc1: "
    )


def test_a_test_missing_a_refused_copy_skips_naming_both(modified_shared, monkeypatch):
    monkeypatch.setattr(conftest, "SHARED_REFUSED", shared_artifacts.seed_cache(modified_shared))
    with pytest.raises(pinned.ArtifactUnavailable) as info:
        pinned.chart_dir("aws-efa-k8s-device-plugin")
    reason = conftest.skip_reason(info.value)
    assert "\n" not in reason
    assert reason.startswith(f"missing kuberay-operator-1.7.0, nvidia-device-plugin-0.18.2, {EFA.folder}, ")
    assert "or put the shared test folder beside the checkout (../shared) | " in reason
    assert reason.endswith(
        f"config/versions.py pins {EFA.digest}; replace that folder with the pinned one or fix the pin"
    )


def test_the_secrets_store_crds_skip_without_the_shared_folder_hint(empty_cache):
    with pytest.raises(pinned.ArtifactUnavailable) as info:
        pinned.secrets_store_crd_dir()
    assert conftest.skip_reason(info.value) == str(info.value)
    assert "../shared" not in str(info.value)
