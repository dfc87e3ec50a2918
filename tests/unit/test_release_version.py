"""R50: one number for a release: pyproject.toml's version is the installed package's (the worker's build id, the
image's tag), the OpenAPI document's info.version, the kustomizations' image tags and the TypeScript client's
package version; `python -m tools.release X.Y.Z` writes every copy. The client pins its tools exactly, so its
lockfile and its generated types are reproducible. Reads files only: no Node needed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from config.settings import release_build_id
from tools import release as release_tool

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client-typescript"


def test_the_installed_package_the_api_document_and_the_client_carry_the_release_version() -> None:
    release = release_tool.release_version()
    document = json.loads((ROOT / "docs" / "api" / "openapi.json").read_text(encoding="utf-8"))
    package = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((CLIENT / "package-lock.json").read_text(encoding="utf-8"))
    assert release_build_id() == release, "reinstall: .venv/bin/python -m pip install -e '.[dev,local]'"
    assert document["info"]["version"] == release, "run python -m starter.service.openapi > docs/api/openapi.json"
    assert package["version"] == release, "client-typescript/package.json's version is the release's"
    assert (lock["version"], lock["packages"][""]["version"]) == (release, release), "run npm install there"
    copies = release_tool.versions_written(ROOT)
    assert set(copies.values()) == {release}, f"python -m tools.release {release} writes them all: {copies}"


def test_the_release_command_writes_every_copy_and_nothing_else(tmp_path: Path) -> None:
    files = [
        release_tool.PYPROJECT,
        *release_tool.KUSTOMIZATIONS,
        release_tool.CLIENT_PACKAGE,
        release_tool.CLIENT_LOCK,
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    release_tool.write_versions(tmp_path, "9.8.7")
    assert set(release_tool.versions_written(tmp_path).values()) == {"9.8.7"}
    for name in files:  # the version's lines changed, every other line as it was
        before = (ROOT / name).read_text(encoding="utf-8").splitlines()
        after = (tmp_path / name).read_text(encoding="utf-8").splitlines()
        assert len(before) == len(after), name
        changed = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
        assert changed and all(release_tool.release_version() in old and "9.8.7" in new for old, new in changed), (
            name,
            changed,
        )


@pytest.mark.parametrize("argument", ["1.3", "v1.3.0", "1.3.0-rc1", ""])
def test_the_release_command_refuses_what_is_not_a_version(argument: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        release_tool.main([argument])
    assert exit_.value.code == 2
    assert "is not X.Y.Z" in capsys.readouterr().err


def test_the_client_pins_every_package_exactly_and_locks_them() -> None:
    package = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((CLIENT / "package-lock.json").read_text(encoding="utf-8"))
    pinned = {**package["dependencies"], **package["devDependencies"]}
    assert {"openapi-fetch", "openapi-typescript", "typescript"} <= set(pinned)
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", version) for version in pinned.values()), pinned
    for name, version in pinned.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
