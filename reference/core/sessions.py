"""The session service behind the HTTP API: create (idempotent), read, finish, cancel, reset, recover.

A session with a live turn is changed through its `Turn`; any other session (paused or terminal, or
every session after a restart) through its stored snapshot. On start, every session the store still
holds as running belongs to a core that stopped under it: it becomes `interrupted`, never replayed.

A create with `continue_from` makes a follow-up session: a new session whose turn starts from the
conversation of the one it names, which must be the same owner's, not reset, not continued before, and
stopped where it can be continued (`reference.core.carried.continuable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path

from contracts.core_api import (
    CancelAnswer,
    CreateSession,
    ResetAnswer,
    SessionCreated,
    SessionStatus,
    Snapshot,
)
from domain.boundary import BoundaryError, action_digest, parse_item
from reference.core.carried import continuable, earlier_task
from reference.core.changes import SnapshotChanges
from reference.core.latches import Latches
from reference.core.model_catalog import ModelFactory, PreparedModel
from reference.core.problems import CoreProblem
from reference.core.script import ScriptError, with_follow_up_script
from reference.core.store import SessionStore, StoredSession
from reference.core.texts import LANGUAGES
from reference.core.turn import Turn, cancel_now, interrupt
from reference.core.world import World

logger = logging.getLogger(__name__)


def _not_found(session_id: str) -> CoreProblem:
    return CoreProblem(404, "session_not_found", f"session_id: there is no session {session_id!r}")


class SessionService:
    def __init__(self, db_path: Path, models: Mapping[str, ModelFactory]) -> None:
        self._db_path = db_path
        self._models = dict(models)
        self._world = World()
        self.latches = Latches()
        self._changes = SnapshotChanges()
        self._turns: dict[str, Turn] = {}
        self._store_or_none: SessionStore | None = None

    @property
    def model_names(self) -> list[str]:
        """The models a create may select, in catalog order."""
        return list(self._models)

    @property
    def _store(self) -> SessionStore:
        if self._store_or_none is None:
            raise RuntimeError("the session service is not started")
        return self._store_or_none

    def start(self) -> None:
        self._store_or_none = SessionStore(self._db_path, on_change=self._changes.notify)
        interrupted = 0
        for session_id in self._store.session_ids_with_status(SessionStatus.RUNNING):
            stored = self._store.load(session_id)
            if stored is None:
                continue
            interrupt(stored.snapshot, stored.request.language)
            self._store.save(stored.snapshot)
            interrupted += 1
        if interrupted:
            logger.warning("%d sessions were running when the core stopped; they are now interrupted", interrupted)

    async def stop(self) -> None:
        """Stop every turn without writing: the next start marks them interrupted."""
        for turn in list(self._turns.values()):
            await turn.abort()
        self._turns.clear()
        self._changes.notify_all()
        if self._store_or_none is not None:
            self._store_or_none.close()
            self._store_or_none = None

    # API operations.

    def create(self, request: CreateSession) -> SessionCreated:
        existing = self._store.find_key(request.idempotency_key)
        if existing is not None:
            if (existing.owner, existing.helper_id) != (request.owner, request.helper_id):
                raise CoreProblem(
                    409,
                    "idempotency_key_conflict",
                    "idempotency_key: this key already names a session of another owner or helper",
                )
            return SessionCreated(session_id=existing.session_id, created=False)
        _check_grants(request)
        earlier = None
        prepared_for = request
        if request.continue_from is not None:
            earlier = self._earlier_conversation(request.continue_from, request.owner)
            scripted = with_follow_up_script(request.task, earlier_task(earlier))
            prepared_for = request.model_copy(update={"task": scripted})
        prepared = self._prepare(prepared_for)
        snapshot = Snapshot(session_id=f"s-{uuid.uuid4().hex}", status=SessionStatus.RUNNING, input_tokens_total=0)
        self._store.insert(request, snapshot)
        turn = Turn(
            request=request,
            snapshot=snapshot,
            prepared=prepared,
            world=self._world.of(request.owner),
            store=self._store,
            on_finished=self._turn_finished,
            latches=self.latches,
            earlier=earlier,
        )
        self._turns[snapshot.session_id] = turn
        turn.start()
        logger.info(
            "session %s created for %s/%s%s",
            snapshot.session_id,
            request.owner,
            request.helper_id,
            "" if request.continue_from is None else f", continuing {request.continue_from}",
        )
        return SessionCreated(session_id=snapshot.session_id, created=True)

    def snapshot(self, session_id: str) -> Snapshot:
        return self._load(session_id).snapshot

    async def snapshot_after(self, session_id: str, after: int | None, wait_ms: int) -> Snapshot:
        """Long poll (R44): the snapshot at once if its version is not `after`, else once it changes or
        `wait_ms` has passed, whichever comes first. A session reset meanwhile answers 404."""
        changed = self._changes.event_for(session_id)
        snapshot = self.snapshot(session_id)
        if after is None or wait_ms <= 0 or snapshot.version != after:
            return snapshot
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), wait_ms / 1000)
        return self.snapshot(session_id)

    def finish(self, session_id: str) -> Snapshot:
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.request_finish()
        # Paused and terminal sessions make no further calls: finish changes nothing there.
        return self._load(session_id).snapshot

    async def cancel(self, session_id: str) -> CancelAnswer:
        turn = self._turns.get(session_id)
        if turn is not None:
            return await turn.cancel()
        stored = self._load(session_id)
        snapshot = stored.snapshot
        if not snapshot.status.is_terminal:
            cancel_now(snapshot, stored.request.language)
            self._store.save(snapshot)
        return CancelAnswer(stopped=True, status=snapshot.status)

    async def reset(self, session_id: str) -> ResetAnswer:
        turn = self._turns.pop(session_id, None)
        if turn is not None:
            await turn.abort()
        self._load(session_id)
        self._store.remove(session_id)
        logger.info("session %s reset", session_id)
        return ResetAnswer(reset=True)

    # Helpers.

    def _load(self, session_id: str) -> StoredSession:
        stored = self._store.load(session_id)
        if stored is None:
            raise _not_found(session_id)
        return stored

    def _earlier_conversation(self, source_id: str, owner: str) -> str:
        """The stored conversation a follow-up continues, or the Problem saying why it cannot be continued.

        Runs on the event loop without an await before the insert, so two creates cannot both continue one
        session. The owner is checked first, so another owner's session shows nothing of its state."""
        source = self._store.source(source_id)
        # Every refusal is a 409: a 404 from create would read as "this session is unknown" (the new one).
        if source is None:
            raise CoreProblem(409, "continue_from_not_found", f"continue_from: there is no session {source_id!r}")
        if source.owner != owner:
            raise CoreProblem(
                409,
                "continue_from_other_owner",
                f"continue_from: session {source_id!r} belongs to another owner, not to {owner!r}",
            )
        if source.removed:
            raise CoreProblem(
                409, "continue_from_reset", f"continue_from: session {source_id!r} was reset and cannot be continued"
            )
        if source.continued_by is not None:
            raise CoreProblem(
                409,
                "continue_from_already_continued",
                f"continue_from: session {source_id!r} is already continued by session {source.continued_by!r}",
            )
        snapshot = source.snapshot
        if snapshot is None or not continuable(snapshot):
            status = "unknown" if snapshot is None else snapshot.status.value
            raise CoreProblem(
                409,
                "continue_from_not_continuable",
                f"continue_from: session {source_id!r} is {status}; only a session stopped in question or "
                "authorization (also when cancelled while stopped there) or ended partial can be continued",
            )
        if source.conversation is None:  # stopped under a reference core from before follow-ups
            raise CoreProblem(
                409,
                "continue_from_not_continuable",
                f"continue_from: session {source_id!r} is {snapshot.status.value} but keeps no conversation",
            )
        return source.conversation

    def _prepare(self, request: CreateSession) -> PreparedModel:
        """Check what the contract's types cannot (language, model, script) before anything is written."""
        if request.language not in LANGUAGES:
            raise CoreProblem(
                400,
                "unsupported_language",
                f"language: {request.language!r} is not supported; use one of {', '.join(LANGUAGES)}",
            )
        factory = self._models.get(request.model)
        if factory is None:
            raise CoreProblem(
                400,
                "unknown_model",
                f"model: {request.model!r} is not offered by this core; known models: {', '.join(self._models)}",
            )
        try:
            return factory(request)
        except ScriptError as error:
            raise CoreProblem(400, "invalid_script", f"task: {error}") from None
        except ValueError as error:
            raise CoreProblem(400, "invalid_task", f"task: {error}") from None

    def _turn_finished(self, session_id: str) -> None:
        self._turns.pop(session_id, None)


def _check_grants(request: CreateSession) -> None:
    """Each grant names one action of the boundary's grammar, and its digest is that action's (R55)."""
    for position, grant in enumerate(request.grants):
        try:
            item = parse_item(grant.action)
        except BoundaryError as error:
            raise CoreProblem(422, "invalid_request", f"grants[{position}].action: {error}") from None
        if action_digest(item) != grant.digest:
            raise CoreProblem(
                422, "grant_mismatch", f"grants[{position}].digest: not the digest of the action {str(item)!r}"
            )
