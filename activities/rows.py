"""Activities that write helper rows and result directories: the store's only writers.

Each write carries the row's admission seq and the writer's generation, so a retried or late write
never overwrites a newer state (R19). Directory removal failures are logged and left for the sweep;
the row operation still succeeds (R29).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from domain.activity_io import CoordinatorWrite, Finalize, Finalized, MarkClosed, RemovedRows, RemoveRows
from domain.outcome import compose_outcome_text, summarize
from domain.rows import RowState
from domain.work import Usage
from store.helper_store import HelperStore
from store.results import ResultDirectories

log = logging.getLogger(__name__)

# The sweep removes orphans only while they are a minority (or a handful): a guard against the wrong store.
SWEEP_SANITY_SHARE = 0.5
SWEEP_SANITY_MINIMUM = 20


class RowActivities:
    def __init__(self, store: HelperStore, results: ResultDirectories, keep_ms: int) -> None:
        self.store = store
        self.results = results
        self.keep_ms = keep_ms

    @activity.defn(name="remove_rows")
    async def remove_rows(self, removal: RemoveRows) -> RemovedRows:
        """Remove rows, then their directories. A directory that resists is logged and left for the orphan
        sweep; the row removal still succeeds (R29)."""
        stored = await self.store.remove_rows(removal.owner, removal.helper_ids)
        directories = {Path(d) for d in stored}
        directories |= {self.results.path_for(removal.owner, row.helper_id, row.seq) for row in removal.rows}
        left = [str(d) for d in sorted(directories) if not self.results.remove(d)]
        return RemovedRows(removed=removal.helper_ids, directories_left=left)

    @activity.defn(name="sweep_orphan_directories")
    async def sweep_orphan_directories(self, older_than_s: int) -> int:
        """Remove result directories no row points at, older than `older_than_s` (a crash or a failed
        removal left them); young ones may belong to a row being written right now."""
        known = {Path(d) for d in await self.store.result_dirs()}
        orphans = self.results.orphans(known, older_than=older_than_s)
        total = self.results.count()
        # A worker pointed at the wrong (or an empty) store would see every directory as an orphan.
        if len(orphans) > SWEEP_SANITY_MINIMUM and len(orphans) > total * SWEEP_SANITY_SHARE:
            log.error(
                "orphan sweep refused: %d of %d result directories have no row; is this the right store?",
                len(orphans),
                total,
            )
            return 0
        removed = [d for d in orphans if self.results.remove(d)]
        if removed:
            log.info("swept %d orphan result directories", len(removed))
        return len(removed)

    @activity.defn(name="mark_closed")
    async def mark_closed(self, close: MarkClosed) -> bool:
        """Close a waiting or running helper's row at once, keeping its last completed message (R21)."""
        key = close.row
        return await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, state=RowState.CLOSED)

    @activity.defn(name="finalize_outcome")
    async def finalize_outcome(self, final: Finalize) -> Finalized:
        """The one finalizer's write: full text to the result directory, then the row (R18, R19)."""
        key = final.row
        row = await self.store.get(key.owner, key.helper_id)
        if row is None or row.seq != key.seq:
            raise ApplicationError(f"row {key.owner}/{key.helper_id}#{key.seq} is gone", non_retryable=True)
        usage = final.usage or Usage(steps=row.steps, work_tokens=row.work_tokens, input_tokens=row.input_tokens)
        full_text = compose_outcome_text(
            kind=final.kind,
            language=final.language,
            message=row.last_message,
            explanation=final.explanation,
            question=final.question,
            authorization=final.authorization,
            actions=final.actions,
            refusals=final.refusals,
        )
        summary = summarize(full_text, final.summary_max, final.language)
        directory = Path(row.result_dir)
        record = {
            "owner": key.owner,
            "helper_id": key.helper_id,
            "seq": key.seq,
            "goal_id": row.goal_id,
            "kind": final.kind.value,
            "summary": summary,
            "explanation": final.explanation,
            "question": final.question,
            "authorization": final.authorization,
            "actions": [a.model_dump(mode="json") for a in final.actions],
            "refusals": final.refusals,
            "usage": usage.model_dump(),
            "model": final.model,
            "started_at": row.started_at.isoformat() if row.started_at else None,
            "finished_at": final.finished_at.isoformat(),
        }
        self.results.write_outcome(directory, full_text, record)
        keep_until = (
            final.finished_at + timedelta(milliseconds=self.keep_ms) if final.state is RowState.CLOSED else None
        )
        applied = await self.store.write_state(
            key.owner,
            key.helper_id,
            key.seq,
            key.generation,
            state=final.state,
            outcome_kind=final.kind,
            summary=summary,
            actions=final.actions,
            steps=usage.steps,
            work_tokens=usage.work_tokens,
            input_tokens=usage.input_tokens,
            finished_at=final.finished_at,
            keep_until=keep_until,
        )
        if applied:
            await self.store.record_usage(row, final.kind, usage, final.finished_at)
        else:
            log.warning(
                "stale finalization of %s/%s at generation %s ignored", key.owner, key.helper_id, key.generation
            )
        return Finalized(applied=applied, summary=summary, result_dir=str(directory))

    @activity.defn(name="coordinator_write")
    async def coordinator_write(self, write: CoordinatorWrite) -> bool:
        """A write after the helper handed its row back: delivered (R28) or closed (R22)."""
        key = write.row
        changes: dict[str, object] = {"state": write.state, "keep_until": write.keep_until}
        if write.delivered_at is not None:
            changes["delivered_at"] = write.delivered_at
        return await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, **changes)
