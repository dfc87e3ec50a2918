"""What every route of one app shares: its settings, its connections (the store and Temporal), whether the service
stops, and its open live-lines streams. It is the app's `state.service`; a route reaches it through its request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import Request

from config.settings import Settings
from starter.service.connections import Connections

# Where a request's arrival is kept in its ASGI scope: a write's bound counts from it (R48).
ARRIVED = "helper_arrived"


@dataclass
class ServiceState:
    settings: Settings
    connections: Connections
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    watches: set[asyncio.Event] = field(default_factory=set)

    def stop(self) -> None:
        """Begin the shutdown: /readyz answers 503 and every live-lines stream ends with `shutdown`."""
        self.stopping.set()
        for watch in self.watches:
            watch.set()


def service_of(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state
