"""The shared test folder: real charts and KubeRay CRDs at the pinned digests, beside the checkout
(``../shared``, or the folder ``$HYPERPOD_RAY_SHARED`` names), copied into the artifact cache so
that tests (tests/conftest.py) and `make review` render offline. Product code knows only the cache
(artifacts/pinned.py); every copy is checked against the pin's digest on the way in.

    .venv/bin/python -m tests.shared_artifacts [FOLDER]   # exit 1 on a copy that is not the pinned one

Layout: ``charts/<folder>`` for each of ``versions.CHART_SOURCES``, ``<folder>`` for
``versions.KUBERAY_CRDS``. The Secrets Store CRDs are not in it: only the fetch gives them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from artifacts.pinned import ArtifactUnavailable, seed
from config import versions
from config.versions import SourcePin

ROOT = Path(__file__).resolve().parent.parent
SHARED_ENV = "HYPERPOD_RAY_SHARED"
# Added to the skip line of a test whose artifact the shared folder carries.
SHARED_HINT = "or put the shared test folder beside the checkout (../shared)"


def shared_folder() -> Path:
    """``$HYPERPOD_RAY_SHARED`` when set (an empty or absent folder: a clone without it), else ../shared."""
    return Path(os.environ.get(SHARED_ENV) or ROOT.parent / "shared")


def carried(shared: Path) -> list[tuple[SourcePin, Path]]:
    """Each pin the shared folder carries, with where it keeps it."""
    return [(pin, shared / "charts" / pin.folder) for pin in versions.CHART_SOURCES.values()] + [
        (versions.KUBERAY_CRDS, shared / versions.KUBERAY_CRDS.folder)
    ]


def carries(what: str) -> bool:
    """Whether the shared folder's layout has a place for the artifact named ``what``."""
    return any(what.split(" ")[0] == pin.folder for pin, _ in carried(Path()))


def seed_cache(shared: Path | None = None) -> list[ArtifactUnavailable]:
    """Copy every pinned folder the shared folder holds into the cache; the copies refused for
    another digest, each a one-line error (those artifacts stay missing unless fetched)."""
    refused = []
    for pin, folder in carried(shared or shared_folder()):
        if folder.is_dir():
            try:
                seed(pin, folder)
            except ArtifactUnavailable as error:
                refused.append(error)
    return refused


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    refused = seed_cache(Path(args[0]) if args else None)
    for error in refused:
        print(f"tests.shared_artifacts: {error}", file=sys.stderr)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
