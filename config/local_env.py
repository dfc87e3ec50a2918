"""The local stack's settings file: how a second shell reaches what `make run` started.

`make run` (`python -m tools.demo run`) writes `<data>/local.env`: the addresses, the store, the result directories
and the codec key of the stack it runs, as `export NAME=value` lines a shell can source. The starter reads it
when run from the checkout (`./data/local.env`) and its environment names none of the connection settings, or
wherever HELPER_ENV_FILE points. Variables already in the environment always win over the file, so nothing
changes for a deployment, where the environment carries every setting.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

FILE_NAME = "local.env"
DEFAULT_FILE = Path("data") / FILE_NAME
ENV_FILE_VARIABLE = "HELPER_ENV_FILE"
# Any of these in the environment means the caller configured the starter itself.
CONNECTION_VARIABLES = ("TEMPORAL_ADDRESS", "HELPER_STORE_URL", "HELPER_CODEC_KEYS")
_ACCEPTED_PREFIXES = ("HELPER_", "TEMPORAL_")


class LocalEnvError(ValueError):
    """The settings file cannot be read."""


def write_local_env(path: Path, values: Mapping[str, str], header: str) -> None:
    """Write `values` as sourceable `export` lines, readable by the owner only (it holds the codec key)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in values.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")
    path.chmod(0o600)  # an existing file keeps its old mode through O_CREAT


def read_local_env(path: Path) -> dict[str, str]:
    """The HELPER_* and TEMPORAL_* assignments of a file written by `write_local_env` (or by hand)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LocalEnvError(f"{path} cannot be read: {error}") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            words = shlex.split(stripped)
        except ValueError as error:
            raise LocalEnvError(f"{path}:{number}: {error}") from None
        if words and words[0] == "export":
            words = words[1:]
        name, separator, value = (words[0] if len(words) == 1 else "").partition("=")
        if not separator or not name.startswith(_ACCEPTED_PREFIXES):
            raise LocalEnvError(f"{path}:{number}: expected `export HELPER_…=value` or `export TEMPORAL_…=value`")
        values[name] = value
    return values


def with_local_env(env: Mapping[str, str], cwd: Path | None = None) -> Mapping[str, str]:
    """`env`, completed from the local stack's settings file when there is one to use (see the module)."""
    explicit = env.get(ENV_FILE_VARIABLE)
    if explicit:
        path = Path(explicit)
    else:
        path = (cwd or Path.cwd()) / DEFAULT_FILE
        if any(name in env for name in CONNECTION_VARIABLES) or not path.is_file():
            return env
    return {**read_local_env(path), **env}
