"""Temporal's own client configuration is honoured as the `temporal` CLI honours it: a temporal.toml profile
names the address and namespace unless the environment or the code sets them (R39)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codec.encryption import CodecError
from config.settings import Settings
from protocol.connection import connect_for, with_temporal_profile

PROFILES = """
[profile.default]
address = "temporal.prod.example:7233"
namespace = "helpers"

[profile.staging]
address = "127.0.0.1:7999"
namespace = "staging"
"""


@pytest.fixture
def profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "temporal.toml"
    path.write_text(PROFILES)
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_PROFILE", "TEMPORAL_API_KEY", "TEMPORAL_TLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(path))
    return path


def test_the_profile_names_the_address_and_namespace(profile_file: Path) -> None:
    settings, config = with_temporal_profile(Settings.from_env({}))
    assert (settings.temporal_address, settings.temporal_namespace) == ("temporal.prod.example:7233", "helpers")
    assert config["target_host"] == "temporal.prod.example:7233"


def test_temporal_profile_chooses_another_profile(profile_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_PROFILE", "staging")
    settings, _ = with_temporal_profile(Settings.from_env({}))
    assert (settings.temporal_address, settings.temporal_namespace) == ("127.0.0.1:7999", "staging")


def test_the_environment_wins_over_the_profile(profile_file: Path) -> None:
    env = {"TEMPORAL_ADDRESS": "10.1.2.3:7233", "TEMPORAL_NAMESPACE": "other"}
    settings, _ = with_temporal_profile(Settings.from_env(env))
    assert (settings.temporal_address, settings.temporal_namespace) == ("10.1.2.3:7233", "other")


def test_without_a_profile_the_local_defaults_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    settings, _ = with_temporal_profile(Settings.from_env({}))
    assert (settings.temporal_address, settings.temporal_namespace) == ("127.0.0.1:7233", "default")


async def test_a_remote_cluster_from_the_profile_needs_the_codec_keys(profile_file: Path) -> None:
    """R39: encryption is required by the address actually connected to, also when a profile names it."""
    with pytest.raises(CodecError, match=r"HELPER_CODEC_KEYS is not set and Temporal \(temporal.prod.example:7233\)"):
        await connect_for(Settings.from_env({}))


def test_a_malformed_profile_file_is_named(profile_file: Path) -> None:
    profile_file.write_text("[profile.default\naddress = ")
    with pytest.raises(CodecError, match=r"temporal\.toml"):
        with_temporal_profile(Settings.from_env({}))
