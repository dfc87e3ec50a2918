"""The local stack's settings file (`data/local.env`): a second shell's starter reaches what `make run` started,
and a deployment's environment is never overridden by it."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from config.local_env import LocalEnvError, read_local_env, with_local_env, write_local_env
from domain.limits import WaitPolicy
from tests.helpers import free_stack_ports
from tools.demo.stack import Stack

VALUES = {
    "TEMPORAL_ADDRESS": "127.0.0.1:9100",
    "HELPER_STORE_URL": "sqlite+aiosqlite:////tmp/with space/helpers.sqlite3",
    "HELPER_CODEC_KEYS": "local:" + "A" * 43 + "=",
}


def test_written_file_is_private_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "data" / "local.env"
    write_local_env(path, VALUES, header="settings\nfor tests")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the codec key
    assert read_local_env(path) == VALUES


def test_a_shell_sources_it_to_the_same_values(tmp_path: Path) -> None:
    path = tmp_path / "local.env"
    write_local_env(path, VALUES, header="h")
    shown = subprocess.run(
        ["bash", "-c", f'. "{path}" && printf "%s\\n" "$HELPER_STORE_URL"'], capture_output=True, text=True, check=True
    )
    assert shown.stdout.strip() == VALUES["HELPER_STORE_URL"]


def test_the_checkout_file_fills_in_only_an_unconfigured_environment(tmp_path: Path) -> None:
    write_local_env(tmp_path / "data" / "local.env", VALUES, header="h")
    assert with_local_env({"PATH": "/bin"}, tmp_path)["TEMPORAL_ADDRESS"] == "127.0.0.1:9100"
    configured = {"TEMPORAL_ADDRESS": "temporal.prod:7233"}
    assert with_local_env(configured, tmp_path) == configured  # a deployment is never changed by a stray file
    assert with_local_env({"PATH": "/bin"}, tmp_path / "elsewhere") == {"PATH": "/bin"}


def test_an_explicit_file_is_read_and_the_environment_still_wins(tmp_path: Path) -> None:
    path = tmp_path / "mine.env"
    write_local_env(path, VALUES, header="h")
    env = with_local_env({"HELPER_ENV_FILE": str(path), "TEMPORAL_ADDRESS": "127.0.0.1:7233"}, tmp_path)
    assert env["TEMPORAL_ADDRESS"] == "127.0.0.1:7233" and env["HELPER_CODEC_KEYS"] == VALUES["HELPER_CODEC_KEYS"]
    with pytest.raises(LocalEnvError, match="cannot be read"):
        with_local_env({"HELPER_ENV_FILE": str(tmp_path / "missing.env")}, tmp_path)


@pytest.mark.parametrize("line", ["export PATH=/evil", "rm -rf /", "export HELPER_X='unclosed", "HELPER_X"])
def test_lines_that_are_not_helper_settings_are_refused(tmp_path: Path, line: str) -> None:
    path = tmp_path / "local.env"
    path.write_text(f"# ok\nexport HELPER_CHAT_URL=http://127.0.0.1:1\n{line}\n")
    with pytest.raises(LocalEnvError, match=r"local\.env:3"):
        read_local_env(path)


def test_the_stacks_file_carries_the_owner_policy_set_for_make_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator takes its policy from the starter that starts it: a second shell's starter reads the policy
    `make run` was given from the stack's file, and nothing else of the environment."""
    monkeypatch.setenv("HELPER_WAIT_REMIND_MS", "20000,40000")
    monkeypatch.setenv("HELPER_WAIT_EXPIRE_MS", "60000")
    monkeypatch.setenv("HELPER_SOMETHING_ELSE", "x")
    stack = Stack(tmp_path / "data", free_stack_ports())
    stack.prepare(fresh=True)
    written = read_local_env(stack.env_file)
    assert (written["HELPER_WAIT_REMIND_MS"], written["HELPER_WAIT_EXPIRE_MS"]) == ("20000,40000", "60000")
    assert "HELPER_SOMETHING_ELSE" not in written and "TEMPORAL_ADDRESS" in written
    # The stack's own starter (the demo's) starts owners with the same policy.
    assert stack.settings().policy.wait == WaitPolicy(remind_after_ms=(20_000, 40_000), expire_after_ms=60_000)
