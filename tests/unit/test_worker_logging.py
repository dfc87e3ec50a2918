"""The worker's logs: one line per expected fault, no line per core request (docs/configuration.md)."""

from __future__ import annotations

import logging

from worker import configure_logging


def test_core_requests_are_not_logged_at_info() -> None:
    """R10: two core requests a second per followed helper would drown the log; httpx logs warnings only."""
    root = logging.getLogger()
    level = root.level
    try:
        configure_logging("INFO")
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("activities.session").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(level)
