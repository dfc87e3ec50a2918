"""R45: one version of each workflow. Workflow code takes patches only through the register, each listed with the
condition that retires it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workflows.patches import LIVE_PATCHES, patched

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def test_no_workflow_calls_the_sdks_patch_functions_outside_the_register() -> None:
    calls = {
        f"{path.name}:{number}"
        for path in WORKFLOWS.glob("*.py")
        if path.name != "patches.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\b(patched|deprecate_patch)\(", line) and "patches.patched(" not in line
    }
    assert calls == set()
    assert all(condition.strip() for condition in LIVE_PATCHES.values()), "each patch names what retires it"


def test_an_unregistered_patch_is_refused() -> None:
    with pytest.raises(KeyError, match="is not in the register"):
        patched("helper-something-new")
