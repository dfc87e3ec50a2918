"""What the reference chat remembers: per owner an idle flag, the received events and their keys.

Kept in memory and, when a state file is given, appended to it as JSON lines and replayed at start,
so a restarted chat still knows every key it took (inbound dedup, R26) and every idle flag.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from contracts.chat_api import EventReceipt, ReceivedEvent, SystemEvent


@dataclass
class _Owner:
    idle: bool = True  # a chat nobody talks to is idle
    events: list[ReceivedEvent] = field(default_factory=list)
    by_key: dict[str, ReceivedEvent] = field(default_factory=dict)


class ChatState:
    def __init__(self, state_file: Path | None = None) -> None:
        self._owners: dict[str, _Owner] = {}
        self._file: IO[str] | None = None
        if state_file is not None:
            self._replay(state_file)
            state_file.parent.mkdir(parents=True, exist_ok=True)
            self._file = state_file.open("a", encoding="utf-8")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _owner(self, owner: str) -> _Owner:
        return self._owners.setdefault(owner, _Owner())

    def owners(self) -> list[str]:
        """Every owner the chat knows: asked about, set or sent an event, here or before a restart."""
        return list(self._owners)

    def idle(self, owner: str) -> bool:
        return self._owner(owner).idle

    def set_idle(self, owner: str, idle: bool) -> None:
        self._owner(owner).idle = idle
        self._append({"kind": "idle", "owner": owner, "idle": idle})

    def events(self, owner: str) -> list[ReceivedEvent]:
        return list(self._owner(owner).events)

    def take(self, owner: str, event: SystemEvent) -> EventReceipt:
        """Queue the event (idle or busy), or answer the first receipt again for a repeated key."""
        state = self._owner(owner)
        first = state.by_key.get(event.key)
        if first is not None:
            return EventReceipt(event_id=first.event_id, duplicate=True, accepted_at=first.accepted_at)
        received = ReceivedEvent(
            event_id=f"e-{uuid.uuid4().hex}",
            key=event.key,
            helper_ids=list(event.helper_ids),
            text=event.text,
            accepted_at=datetime.now(UTC),
            kind=event.kind,
        )
        self._remember(owner, received)
        self._append({"kind": "event", "owner": owner, "event": received.model_dump(mode="json")})
        return EventReceipt(event_id=received.event_id, duplicate=False, accepted_at=received.accepted_at)

    def _remember(self, owner: str, received: ReceivedEvent) -> None:
        state = self._owner(owner)
        state.events.append(received)
        state.by_key[received.key] = received

    def _append(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._file.flush()

    def _replay(self, state_file: Path) -> None:
        if not state_file.exists():
            return
        for line in state_file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if record["kind"] == "idle":
                self._owner(record["owner"]).idle = bool(record["idle"])
            elif record["kind"] == "event":
                self._remember(record["owner"], ReceivedEvent.model_validate(record["event"]))
