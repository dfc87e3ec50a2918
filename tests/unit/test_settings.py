"""Configuration from the environment: defaults, overrides, and errors that name the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from config.settings import Settings, SettingsError, release_build_id, retired_variables_set
from config.store_address import StoreAddress
from domain.limits import (
    HELPER_CEILING_TOKENS,
    HELPER_CHECK_MS,
    HELPER_DEADLINE_MS,
    HELPER_GRACE_MS,
    HELPER_INPUT_CEILING_TOKENS,
    HELPER_KEEP_MS,
    HELPER_MAX_OPEN,
    HELPER_MAX_ROWS,
    HELPER_MAX_RUNNING,
    HELPER_SUMMARY_MAX,
    TURN_MAX_STEPS_HELPER,
    FollowTuning,
)

# variable -> (the raw value to set, the Settings field it lands in)
OVERRIDES: dict[str, tuple[str, str]] = {
    "TEMPORAL_ADDRESS": ("temporal.example:7233", "temporal_address"),
    "TEMPORAL_NAMESPACE": ("helpers-prod", "temporal_namespace"),
    "HELPER_TASK_QUEUE": ("helpers-eu", "task_queue"),
    "HELPER_STORE_URL": ("postgresql+asyncpg://iva@db/helpers", "store"),
    "HELPER_RESULTS_DIR": ("/var/lib/helpers/results", "results_dir"),
    "HELPER_CORE_URL": ("http://core:8310", "core_url"),
    "HELPER_CHAT_URL": ("http://chat:8320", "chat_url"),
}
# variable -> (the dotted setting it lands in, a value different from the default)
INT_OVERRIDES: dict[str, tuple[str, int]] = {
    "HELPER_MAX_OPEN": ("policy.max_open", 5),
    "HELPER_MAX_RUNNING": ("policy.max_running", 2),
    "HELPER_MAX_ROWS": ("policy.max_rows", 40),
    "HELPER_KEEP_MS": ("policy.keep_ms", 3_600_000),
    "HELPER_SUMMARY_MAX": ("policy.summary_max", 900),
    "HELPER_CHECK_MS": ("policy.check_ms", 5_000),
    "HELPER_DEADLINE_MS": ("policy.limits.deadline_ms", 600_000),
    "HELPER_GRACE_MS": ("policy.limits.grace_ms", 60_000),
    "HELPER_CEILING_TOKENS": ("policy.limits.ceiling_tokens", 250_000),
    "TURN_MAX_STEPS_HELPER": ("policy.limits.max_steps", 40),
    "HELPER_INPUT_CEILING_TOKENS": ("policy.limits.max_input_tokens", 2_000_000),
    "HELPER_POLL_MS": ("policy.follow.poll_ms", 250),
    "HELPER_LONG_POLL_MS": ("policy.follow.wait_ms", 10_000),
    "HELPER_FOLLOW_WINDOW_MS": ("policy.follow.window_ms", 30_000),
    "HELPER_FOLLOW_RESUME_MS": ("policy.follow.resume_ms", 2_000),
    "HELPER_CORE_SILENCE_MS": ("policy.follow.silence_ms", 120_000),
    "HELPER_CORE_BAD_ANSWERS": ("policy.follow.bad_answers", 3),
}


def setting(settings: Settings, dotted: str) -> object:
    value: object = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def test_defaults_are_the_seeds_constants() -> None:
    """R1, docs/configuration.md's limits: without variables every limit is the seed's default."""
    settings = Settings.from_env({})
    assert settings == Settings()
    policy = settings.policy
    assert (policy.max_open, policy.max_running, policy.max_rows) == (
        HELPER_MAX_OPEN,
        HELPER_MAX_RUNNING,
        HELPER_MAX_ROWS,
    )
    assert (policy.keep_ms, policy.summary_max, policy.check_ms) == (
        HELPER_KEEP_MS,
        HELPER_SUMMARY_MAX,
        HELPER_CHECK_MS,
    )
    limits = policy.limits
    assert (limits.deadline_ms, limits.grace_ms, limits.ceiling_tokens) == (
        HELPER_DEADLINE_MS,
        HELPER_GRACE_MS,
        HELPER_CEILING_TOKENS,
    )
    assert (limits.max_steps, limits.max_input_tokens) == (TURN_MAX_STEPS_HELPER, HELPER_INPUT_CEILING_TOKENS)
    assert policy.follow == FollowTuning()
    assert (HELPER_MAX_OPEN, HELPER_MAX_RUNNING, HELPER_MAX_ROWS) == (3, 3, 20)
    assert (HELPER_DEADLINE_MS, HELPER_GRACE_MS, HELPER_CEILING_TOKENS) == (2_700_000, 120_000, 1_000_000)
    assert (HELPER_CHECK_MS, HELPER_SUMMARY_MAX, HELPER_KEEP_MS) == (15_000, 1_500, 86_400_000)
    assert (TURN_MAX_STEPS_HELPER, HELPER_INPUT_CEILING_TOKENS) == (80, 4_000_000)


@pytest.mark.parametrize("variable", sorted(OVERRIDES))
def test_each_plain_variable_overrides_its_setting(variable: str) -> None:
    """Every connection variable is read."""
    raw, field = OVERRIDES[variable]
    settings = Settings.from_env({variable: raw})
    parsed: dict[str, Callable[[str], object]] = {"results_dir": Path, "store": StoreAddress.parse}
    expected = parsed[field](raw) if field in parsed else raw
    assert setting(settings, field) == expected
    assert settings.model_copy(update={field: getattr(Settings(), field)}) == Settings()


@pytest.mark.parametrize("variable", sorted(INT_OVERRIDES))
def test_each_limit_variable_overrides_its_limit(variable: str) -> None:
    """R1, docs/configuration.md's limits, all configurable: every HELPER_* limit is read from its variable, alone."""
    dotted, value = INT_OVERRIDES[variable]
    settings = Settings.from_env({variable: str(value)})
    assert setting(settings, dotted) == value
    assert setting(Settings(), dotted) != value, "the test value differs from the default"


def test_all_variables_together() -> None:
    """R1, docs/configuration.md's limits: all overrides at once land in their own settings."""
    env = {name: raw for name, (raw, _) in OVERRIDES.items()}
    env |= {name: str(value) for name, (_, value) in INT_OVERRIDES.items()}
    settings = Settings.from_env(env)
    for name, (dotted, value) in INT_OVERRIDES.items():
        assert setting(settings, dotted) == value, name
    assert settings.results_dir == Path("/var/lib/helpers/results")


def test_underscores_group_digits() -> None:
    """Numbers may be written as the seed writes them, with underscores."""
    assert Settings.from_env({"HELPER_DEADLINE_MS": "2_700_000"}).policy.limits.deadline_ms == 2_700_000


def test_a_retired_variable_changes_nothing_and_is_named_with_why() -> None:
    """R57: the follow's heartbeat timeout is gone; a deployment that still sets it is told, and it is not read."""
    env = {"HELPER_FOLLOW_LIVENESS_MS": "60000"}
    assert Settings.from_env(env).policy == Settings.from_env({}).policy
    (line,) = retired_variables_set(env)
    assert line.startswith("HELPER_FOLLOW_LIVENESS_MS is no longer read: a follow sends no heartbeats")
    assert retired_variables_set({"HELPER_POLL_MS": "500"}) == []


def test_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a mapping the process environment is read."""
    monkeypatch.setenv("HELPER_MAX_OPEN", "7")
    monkeypatch.setenv("HELPER_CORE_URL", "http://elsewhere:1")
    settings = Settings.from_env()
    assert settings.policy.max_open == 7 and settings.core_url == "http://elsewhere:1"


@pytest.mark.parametrize("variable", sorted(INT_OVERRIDES))
@pytest.mark.parametrize("raw", ["many", "1.5", "", "3e2"])
def test_a_value_that_is_not_a_number_names_the_variable(variable: str, raw: str) -> None:
    """A bad value is an error naming the variable; nothing starts half-configured."""
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: raw})


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("HELPER_MAX_OPEN", "0"), ("HELPER_DEADLINE_MS", "-1"), ("HELPER_MAX_ROWS", "1"), ("HELPER_POLL_MS", "0")],
)
def test_a_value_out_of_range_names_the_variable(variable: str, raw: str) -> None:
    """A number out of range is an error naming the variable too."""
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: raw})


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("HELPER_MAX_OPEN", "0"), ("HELPER_DEADLINE_MS", "-1"), ("HELPER_MAX_ROWS", "1"), ("HELPER_SUMMARY_MAX", "10")],
)
def test_a_value_out_of_range_is_refused(variable: str, raw: str) -> None:
    """A number out of range is refused (a SettingsError, never a half-read configuration)."""
    with pytest.raises(SettingsError, match="should be greater than"):
        Settings.from_env({variable: raw})


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("127.0.0.1:7233", True),
        ("localhost:7233", True),
        ("[::1]:7233", True),
        ("127.8.0.1:7233", True),
        ("temporal-frontend.temporal.svc.cluster.local:7233", False),
        ("10.0.0.7:7233", False),
        ("[2001:db8::1]:7233", False),
        ("localhost.example.com:7233", False),
    ],
)
def test_encryption_is_required_unless_temporal_is_on_this_machine(address: str, local: bool) -> None:
    """R39: without keys, talking to a Temporal elsewhere is refused with a message naming what to set; the
    local run (loopback) needs no keys; keys or an explicit HELPER_CODEC_REQUIRED=false lift the refusal."""
    settings = Settings.from_env({"TEMPORAL_ADDRESS": address})
    assert settings.encryption_required is not local
    problem = settings.encryption_problem()
    if local:
        assert problem is None
    else:
        assert problem is not None and "HELPER_CODEC_KEYS" in problem and "HELPER_CODEC_REQUIRED=false" in problem
    keyed = Settings.from_env({"TEMPORAL_ADDRESS": address, "HELPER_CODEC_KEYS": "k1:" + "A" * 43 + "="})
    assert keyed.encryption_problem() is None
    opted_out = Settings.from_env({"TEMPORAL_ADDRESS": address, "HELPER_CODEC_REQUIRED": "false"})
    assert opted_out.encryption_problem() is None
    forced = Settings.from_env({"TEMPORAL_ADDRESS": address, "HELPER_CODEC_REQUIRED": "true"})
    assert forced.encryption_problem() is not None


@pytest.mark.parametrize(
    "variable",
    ["HELPER_CODEC_REQUIRED", "HELPER_CODEC_ALLOW_PLAINTEXT", "HELPER_MIGRATE_ON_START", "HELPER_PROMOTE_BUILD"],
)
def test_a_flag_that_is_neither_true_nor_false_names_the_variable(variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: "maybe"})


def test_every_worker_is_a_build_of_one_worker_deployment() -> None:
    """R45: Worker Versioning is always on: by default the worker polls as the installed release of the
    deployment `helper-runtime` and makes that build current; a cluster names its build and promotes by hand."""
    from worker import deployment_of

    default = deployment_of(Settings.from_env({}))
    assert default.use_worker_versioning
    assert (default.version.deployment_name, default.version.build_id) == ("helper-runtime", release_build_id())
    assert Settings.from_env({}).promote_build
    named = Settings.from_env({"HELPER_BUILD_ID": "2026-12-02.1", "HELPER_PROMOTE_BUILD": "false"})
    assert deployment_of(named).version.build_id == "2026-12-02.1" and not named.promote_build
    for variable in ("HELPER_BUILD_ID", "HELPER_DEPLOYMENT_NAME"):
        with pytest.raises(SettingsError, match=variable):
            Settings.from_env({variable: ""})


def test_the_worker_refuses_to_start_without_keys_for_a_remote_temporal() -> None:
    """R39: a worker pointed at a Temporal elsewhere without keys stops at once (exit 2) and says what to set,
    before it connects to anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))}
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=Path(__file__).resolve().parents[2],
        env={**env, "TEMPORAL_ADDRESS": "temporal.example.invalid:7233"},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"HELPER_CODEC_KEYS" in done.stderr and b"Traceback" not in done.stderr


def test_the_parts_of_the_tree_read_their_own_variables() -> None:
    """The starter API's, the codec server's and the worker's logging settings are parts of the one tree: each
    variable lands in its part, `_` groups digits there too, and a bad value names the variable and its value."""
    settings = Settings.from_env(
        {
            "HELPER_API_MAX_WATCHES": "1_000",
            "HELPER_CODEC_PORT": "9330",
            "HELPER_CODEC_ORIGINS": "http://ui:8233",
            "HELPER_LOG_LEVEL": "DEBUG",
            "OTEL_SERVICE_NAME": "helpers-eu",
        }
    )
    assert settings.service.max_watches == 1_000
    assert (settings.codec.port, settings.codec.origin_list) == (9330, ["http://ui:8233"])
    assert settings.logging.level == "DEBUG"
    assert settings.tracing_name("helper-worker") == "helpers-eu"
    assert Settings.from_env({}).tracing_name("helper-worker") == "helper-worker"
    with pytest.raises(SettingsError, match="HELPER_LOG_LEVEL='LOUD'"):
        Settings.from_env({"HELPER_LOG_LEVEL": "LOUD"})
    with pytest.raises(SettingsError, match="HELPER_API_STORE_POOL_SIZE='0'"):
        Settings.from_env({"HELPER_API_STORE_POOL_SIZE": "0"})


def test_a_flag_takes_yes_and_no_in_any_case() -> None:
    for raw, value in (("1", True), ("TRUE", True), (" yes ", True), ("0", False), ("False", False), ("no", False)):
        assert Settings.from_env({"HELPER_PROMOTE_BUILD": raw}).promote_build is value


def test_a_secret_never_appears_in_an_error() -> None:
    """A refused value of a secret (a field kept out of repr) is shown as ***."""
    from config.settings import _named

    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"service": {"HELPER_API_TOKEN": 5}})
    message = _named(caught.value, {"HELPER_API_TOKEN": "s3cret-s3cret-s3cret"})
    assert message == "HELPER_API_TOKEN=***: Input should be a valid string"
