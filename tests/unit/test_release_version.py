"""R50: one number for a release: pyproject.toml's version is the installed package's (the worker's build id, the
image's tag), the OpenAPI document's info.version, and the TypeScript client's package version. The client pins
its tools exactly, so its lockfile and its generated types are reproducible. Reads files only: no Node needed."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from config.settings import release_build_id

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client-typescript"


def _release() -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert isinstance(version, str)
    return version


def test_the_installed_package_the_api_document_and_the_client_carry_the_release_version() -> None:
    release = _release()
    document = json.loads((ROOT / "docs" / "api" / "openapi.json").read_text(encoding="utf-8"))
    package = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((CLIENT / "package-lock.json").read_text(encoding="utf-8"))
    assert release_build_id() == release, "reinstall: .venv/bin/python -m pip install -e '.[dev,local]'"
    assert document["info"]["version"] == release, "run python -m starter.service.openapi > docs/api/openapi.json"
    assert package["version"] == release, "client-typescript/package.json's version is the release's"
    assert (lock["version"], lock["packages"][""]["version"]) == (release, release), "run npm install there"


def test_the_client_pins_every_package_exactly_and_locks_them() -> None:
    package = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((CLIENT / "package-lock.json").read_text(encoding="utf-8"))
    pinned = {**package["dependencies"], **package["devDependencies"]}
    assert {"openapi-fetch", "openapi-typescript", "typescript"} <= set(pinned)
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", version) for version in pinned.values()), pinned
    for name, version in pinned.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
