"""Activities that write helper rows and result directories: the store's only writers.

Each write carries the row's admission seq and the writer's generation, so a retried or late write
never overwrites a newer state (R19). Directory removal failures are logged and left for the sweep;
the row operation still succeeds (R29).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from contracts.core_api import Action, Snapshot
from domain.audit import AUDIT_KEEP_MS
from domain.bounds import ROW_ACTIONS_MAX, first
from domain.messages.activities import (
    CoordinatorWrite,
    Finalize,
    Finalized,
    MarkClosed,
    RemovedRows,
    RemoveRows,
    WrittenOutcome,
)
from domain.outcome import Outcome, compose_outcome_text, summarize
from domain.rows import HelperRow, RowState
from domain.run.follow import authorization_text, session_message
from domain.work import Usage
from observability import recording
from protocol.names import (
    COORDINATOR_WRITE,
    FINALIZE_OUTCOME,
    FORGET_WAIT_RECORDS,
    MARK_CLOSED,
    REMOVE_ROWS,
    SWEEP_ORPHAN_DIRECTORIES,
)
from store.helper_store import HelperStore, RowChanges, RowGone
from store.results import SESSION_JSON, ResultDirectories

log = logging.getLogger(__name__)


async def admitted_row(store: HelperStore, owner: str, helper_id: str, seq: int) -> HelperRow:
    """The row of exactly this admission; if it is gone, the activity fails for good (retrying cannot help)."""
    try:
        return await store.admitted(owner, helper_id, seq)
    except RowGone as gone:
        raise ApplicationError(str(gone), non_retryable=True) from None


async def remove_rows(store: HelperStore, results: ResultDirectories, removal: RemoveRows) -> RemovedRows:
    """Remove rows, then their directories. A directory that resists is logged and left for the orphan sweep;
    the row removal still succeeds (R29)."""
    # Only the rows of these admissions: after a lost admission the same id may hold another's row.
    seqs = {row.helper_id: row.seq for row in removal.rows}
    stored = await store.remove_rows(removal.owner, removal.helper_ids, seqs, removal.ended)
    directories = {Path(d) for d in stored}
    directories |= {results.path_for(removal.owner, row.helper_id, row.seq) for row in removal.rows}
    # Deleting a tree is blocking file I/O: off the worker's event loop, like every other result write.
    left = [str(d) for d in sorted(directories) if not await asyncio.to_thread(results.remove, d)]
    return RemovedRows(removed=removal.helper_ids, directories_left=left)


@dataclass(frozen=True)
class WholeSession:
    snapshot: Snapshot

    @property
    def message(self) -> str:
        return session_message(self.snapshot)

    @property
    def actions(self) -> list[Action]:
        return self.snapshot.actions

    @property
    def refusals(self) -> list[str]:
        return self.snapshot.refusals


class RowActivities:
    def __init__(self, store: HelperStore, results: ResultDirectories, audit_keep_ms: int = AUDIT_KEEP_MS) -> None:
        self.store = store
        self.results = results
        self.audit_keep = timedelta(milliseconds=audit_keep_ms)

    @activity.defn(name=REMOVE_ROWS)
    async def remove_rows(self, removal: RemoveRows) -> RemovedRows:
        """Remove rows, then their directories (R29)."""
        return await remove_rows(self.store, self.results, removal)

    @activity.defn(name=SWEEP_ORPHAN_DIRECTORIES)
    async def sweep_orphan_directories(self, older_than_s: int) -> int:
        """Remove result directories no row points at, older than `older_than_s` (a crash or a failed
        removal left them); young ones may belong to a row being written right now."""
        known = {Path(d) for d in await self.store.result_dirs()}
        removed = await asyncio.to_thread(self.results.sweep_orphans, known, older_than_s)
        if removed:
            log.info("swept %d orphan result directories", len(removed))
        return len(removed)

    @activity.defn(name=FORGET_WAIT_RECORDS)
    async def forget_wait_records(self) -> int:
        """Remove the records of waits that ended longer ago than HELPER_AUDIT_KEEP_MS (R56)."""
        forgotten = await self.store.forget_wait_records(datetime.now(UTC) - self.audit_keep)
        if forgotten:
            log.info("forgot %d wait records past their keep", forgotten)
        return forgotten

    @activity.defn(name=MARK_CLOSED)
    @recording.names_store_writes("close")
    async def mark_closed(self, close: MarkClosed) -> bool:
        """Close a waiting or running helper's row at once, keeping its last completed message (R21)."""
        key = close.row
        return await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, state=RowState.CLOSED)

    @activity.defn(name=FINALIZE_OUTCOME)
    @recording.names_store_writes("finalize")
    async def finalize_outcome(self, final: Finalize) -> Finalized:
        """The one finalizer's write: full text to the result directory, then the row (R18, R19)."""
        key = final.row
        row = await admitted_row(self.store, key.owner, key.helper_id, key.seq)
        if row.outcome_kind is not None:
            return await self._already_final(row)
        usage = final.usage or Usage(steps=row.steps, work_tokens=row.work_tokens, input_tokens=row.input_tokens)
        directory = Path(row.result_dir)
        whole = await asyncio.to_thread(self._whole_session, directory, final)
        message = whole.message if whole and len(whole.message) > len(row.last_message) else row.last_message
        actions = whole.actions if whole and len(whole.actions) >= len(final.actions) else final.actions
        refusals = whole.refusals if whole and len(whole.refusals) >= len(final.refusals) else final.refusals
        question = final.question
        authorization = final.authorization
        if whole is not None:
            # The payload carried these cut; the result directory gets them whole (R36).
            if question is not None and whole.snapshot.question:
                question = whole.snapshot.question
            if authorization is not None and authorization_text(whole.snapshot):
                authorization = authorization_text(whole.snapshot)
        full_text = compose_outcome_text(
            kind=final.kind,
            language=final.language,
            message=message,
            explanation=final.explanation,
            question=question,
            choices=final.choices,
            authorization=authorization,
            actions=actions,
            refusals=refusals,
            follow_up_of=row.follow_up_of,
            granted=row.granted_action,
        )
        summary = summarize(full_text, final.summary_max, final.language)
        record = Outcome(
            owner=key.owner,
            helper_id=key.helper_id,
            seq=key.seq,
            goal_id=row.goal_id,
            kind=final.kind,
            summary=summary,
            explanation=final.explanation,
            question=question,
            choices=final.choices,
            authorization=authorization,
            actions=actions,
            refusals=refusals,
            usage=usage,
            model=final.model,
            started_at=row.started_at,
            finished_at=final.finished_at,
        ).model_dump(mode="json")
        await asyncio.to_thread(self.results.write_outcome, directory, full_text, record)
        applied = await self.store.write_outcome(
            row,
            key.generation,
            usage,
            state=final.state,
            outcome_kind=final.kind,
            summary=summary,
            choices=final.choices,
            actions=first(actions, ROW_ACTIONS_MAX),
            steps=usage.steps,
            work_tokens=usage.work_tokens,
            input_tokens=usage.input_tokens,
            finished_at=final.finished_at,
            keep_until=final.keep_until,
        )
        if applied:
            recording.finalized(final.kind, row.admitted_at, row.started_at, final.finished_at)
        else:
            log.warning(
                "stale finalization of %s/%s at generation %s ignored", key.owner, key.helper_id, key.generation
            )
        return Finalized(applied=applied, summary=summary, result_dir=str(directory))

    async def _already_final(self, row: HelperRow) -> Finalized:
        """The row has its outcome: this finalization runs again, because a workflow task that ran its local
        activities was lost (the worker died before completing it) and its retry runs them anew, or because the
        activity's own retry follows an attempt that wrote. The first outcome stays, files and row (R19): the
        retry may see another world (a session the first run reset is gone), and the owner may have read it."""
        assert row.outcome_kind is not None
        recorded = await asyncio.to_thread(self.results.read_outcome, Path(row.result_dir)) or {}
        explanation = recorded.get("explanation")
        explanation = explanation if isinstance(explanation, str) else ""
        log.info("%s/%s is final already (%s): that outcome stays", row.owner, row.helper_id, row.outcome_kind.value)
        return Finalized(
            applied=False,
            summary=row.summary or "",
            result_dir=row.result_dir,
            already=WrittenOutcome(
                kind=row.outcome_kind, explanation=explanation if isinstance(explanation, str) else ""
            ),
        )

    def _whole_session(self, directory: Path, final: Finalize) -> WholeSession | None:
        """The followed session's last snapshot from the result directory, if it is this helper's session."""
        if final.session_id is None:
            return None
        stored = self.results.read_session(directory)
        if stored is None:
            return None
        try:
            snapshot = Snapshot.model_validate(stored)
        except ValidationError:
            log.warning("unreadable %s in %s ignored", SESSION_JSON, directory)
            return None
        if snapshot.session_id != final.session_id:
            return None
        return WholeSession(snapshot)

    @activity.defn(name=COORDINATOR_WRITE)
    @recording.names_store_writes("coordinator")
    async def coordinator_write(self, write: CoordinatorWrite) -> bool:
        """A write after the helper handed its row back: delivered (R28) or closed (R22)."""
        key = write.row
        changes = RowChanges(state=write.state, keep_until=write.keep_until)
        if write.delivered_at is not None:
            changes["delivered_at"] = write.delivered_at
        if write.wait is not None:
            changes["wait_ends_at"] = write.wait.ends_at
            changes["wait_reminders_ms"] = write.wait.reminders_ms
        return await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, write.ended, **changes)
