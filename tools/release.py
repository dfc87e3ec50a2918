"""Set the release version everywhere it must be written down: `python -m tools.release 1.3.0`.

pyproject.toml's version is the release. The worker's build id and the API document's version are read from the
installed package; the image is tagged with it by `make image`. Three files cannot read it and carry a copy:
the kustomizations' image tags and the TypeScript client's package (and its lockfile). This command writes the
copies, reinstalls the package so the installed version agrees, and regenerates the API document;
tests/unit/test_release_version.py fails while any copy disagrees.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = "pyproject.toml"
KUSTOMIZATIONS = ("deploy/k8s/kustomization.yaml", "deploy/k8s/migrate/kustomization.yaml")
CLIENT_PACKAGE = "client-typescript/package.json"
CLIENT_LOCK = "client-typescript/package-lock.json"
API_DOCUMENT = "docs/api/openapi.json"
# A build id and an image tag both take it; plain X.Y.Z keeps the two and npm's semver in agreement.
VERSION = re.compile(r"\d+\.\d+\.\d+")
# The subprocesses are local: an editable reinstall without dependencies and the document's generator.
STEP_TIMEOUT_S = 300

# Each written copy: its file and the one line that carries the version (group 2), laid out as the file has it.
WRITTEN = (
    (PYPROJECT, r'^(version = )"([^"]*)"()$'),
    *((kustomization, r'^(    newTag: )"([^"]*)"()$') for kustomization in KUSTOMIZATIONS),
    (CLIENT_PACKAGE, r'^(  "version": )"([^"]*)"(,)$'),
)
WRITTEN_FILES = (*(name for name, _ in WRITTEN), CLIENT_LOCK, API_DOCUMENT)


def release_version(root: Path = ROOT) -> str:
    """The release's version, as pyproject.toml says."""
    with (root / PYPROJECT).open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def versions_written(root: Path) -> dict[str, str]:
    """Every copy of the version in the files under root, by where it is; a file without exactly one is an error."""
    found: dict[str, str] = {}
    for name, pattern in WRITTEN:
        matches = re.findall(pattern, (root / name).read_text(encoding="utf-8"), flags=re.M)
        if len(matches) != 1:
            raise ValueError(f"{name}: expected one line matching {pattern!r}, found {len(matches)}")
        found[name] = matches[0][1]
    lock = json.loads((root / CLIENT_LOCK).read_text(encoding="utf-8"))
    found[CLIENT_LOCK] = lock["version"]
    found[f"{CLIENT_LOCK} (packages[''])"] = lock["packages"][""]["version"]
    return found


def write_versions(root: Path, version: str) -> None:
    versions_written(root)  # every copy is where it is looked for, before anything is written
    for name, pattern in WRITTEN:
        path = root / name
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(pattern, rf'\g<1>"{version}"\g<3>', text, flags=re.M), encoding="utf-8")
    lock_path = root / CLIENT_LOCK
    lock = json.loads(lock_path.read_text(encoding="utf-8"))
    lock["version"] = version
    lock["packages"][""]["version"] = version
    lock_path.write_text(json.dumps(lock, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def set_version(version: str) -> None:
    write_versions(ROOT, version)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-e",
            str(ROOT),
        ],
        check=True,
        timeout=STEP_TIMEOUT_S,
    )
    # A fresh interpreter, so the generator reads the version just installed.
    document = subprocess.run(
        [sys.executable, "-m", "starter.service.openapi"],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=STEP_TIMEOUT_S,
    ).stdout
    (ROOT / API_DOCUMENT).write_text(document, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.release",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        epilog="Exit codes: 0 written; 2 not a version (X.Y.Z). Then: record the build's histories "
        "(python -m tests.replay.record), make image, and the steps in docs/operations.md, 'Releases'.",
    )
    parser.add_argument("version", help="the release's version, X.Y.Z (the image tag and the worker's build id)")
    version = parser.parse_args(argv).version
    if not VERSION.fullmatch(version):
        parser.error(f"version {version!r} is not X.Y.Z")
    set_version(version)
    print(f"Release {version} written: {', '.join(WRITTEN_FILES)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
