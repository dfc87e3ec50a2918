"""What an entry point's --help says of its environment and its exit codes. The variables and their defaults come
from the settings tree (`config.settings.tree_variables`), so a help text names every variable a process reads and
none it does not; docs/configuration.md says what each one means. Building a help text reads no variable."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from config.settings import TEMPORAL_CLIENT_VARIABLES

MEANINGS = "docs/configuration.md"
_NAME_WIDTH = 36
_WIDTH = 100


def shown_default(name: str, value: object) -> str:
    """A default as the docs write it: 2,500 for a number (a port as it is), true or false, unset for none."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if name.endswith("_PORT") else f"{value:,}"
    return str(value) or '""'


def environment(
    variables: Iterable[tuple[str, object]],
    *,
    title: str = "Environment",
    temporal_client: bool = False,
    notes: Sequence[str] = (),
    meanings: str = MEANINGS,
) -> str:
    """The variables with their defaults, one a line; with `temporal_client`, the Temporal SDK's own too."""
    lines = [f"{title} (variable, default; what each means: {meanings}):"]
    lines += [f"  {name:<{_NAME_WIDTH}}{shown_default(name, default)}" for name, default in variables]
    if temporal_client:
        lines += textwrap.wrap(
            "Temporal's own client settings, read as the `temporal` CLI reads them: "
            + ", ".join(TEMPORAL_CLIENT_VARIABLES),
            _WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    for note in notes:
        lines += textwrap.wrap(note, _WIDTH, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines)


def paragraph(text: str) -> str:
    """Text wrapped as the help's epilogs are (argparse's raw formatter keeps them as given)."""
    return textwrap.fill(text, _WIDTH)


def exit_codes(codes: Sequence[tuple[int, str]]) -> str:
    """An exit codes table: each code with what it means."""
    return "\n".join(["Exit codes:", *(f"  {code:<3} {meaning}" for code, meaning in codes)])
