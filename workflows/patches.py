"""The patch register: every live `workflow.patched` id, with the condition under which it is retired.

A change to workflow code ships as a new build, not as a patch: helpers, Goal checks and sweeps are PINNED to the
build they started on, and a coordinator continues as new onto the current build (docs/operations.md,
"Releases"). A patch is needed only where a change must reach runs already under way on a released build, for
example a fix applied to running helpers by moving them to the new build with a versioning override. Such a
patch is born here, with the condition after which `workflow.deprecate_patch` replaces it (no run of the old
code is left: the old build is drained), and is removed one release after that. Workflow code calls `patched`
below, never `workflow.patched` directly; tests/unit/test_patches.py holds the code to that.
"""

from __future__ import annotations

from temporalio import workflow

# patch id -> the condition after which it is deprecated, then removed.
LIVE_PATCHES: dict[str, str] = {}


def patched(patch_id: str) -> bool:
    """`workflow.patched` for a registered patch; an unregistered id is a programming error."""
    if patch_id not in LIVE_PATCHES:
        raise KeyError(f"patch {patch_id!r} is not in the register (workflows/patches.py)")
    return workflow.patched(patch_id)
