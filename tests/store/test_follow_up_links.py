"""Follow-ups in the store: the admission links both rows and delivers the earlier one, in one
transaction, guarded by the earlier row's generation; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain.messages.activities import FollowedUp
from domain.outcome import OutcomeKind
from domain.rows import RowState
from store.helper_store import HelperStore
from tests.store.test_helper_store import row, store  # noqa: F401  (the SQLite / PostgreSQL fixture)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_a_follow_up_admission_links_both_rows_and_delivers_the_earlier(store: HelperStore) -> None:  # noqa: F811
    await store.insert_admitted(row("h1", seq=1, state=RowState.UNREPORTED, outcome_kind=OutcomeKind.QUESTION))
    earlier = FollowedUp(
        helper_id="h1",
        seq=1,
        generation=4,
        state=RowState.DELIVERED,
        delivered_at=NOW,
        keep_until=NOW + timedelta(hours=24),
    )

    assert await store.insert_admitted(row("h2", seq=2, follow_up_of="h1"), earlier)

    first, second = await store.get("anna", "h1"), await store.get("anna", "h2")
    assert first is not None and second is not None
    assert (first.followed_up_by, second.follow_up_of) == ("h2", "h1")
    assert first.state is RowState.DELIVERED and first.delivered_at == NOW and first.generation == 4
    assert first.keep_until == NOW + timedelta(hours=24)
    # A retried admission changes nothing more.
    assert not await store.insert_admitted(row("h2", seq=2, follow_up_of="h1"), earlier)


async def test_a_stale_link_does_not_overwrite_a_newer_earlier_row(store: HelperStore) -> None:  # noqa: F811
    await store.insert_admitted(row("h1", seq=1, state=RowState.UNREPORTED))
    assert await store.write_state("anna", "h1", 1, 9, state=RowState.CLOSED)
    stale = FollowedUp(helper_id="h1", seq=1, generation=5, state=RowState.DELIVERED, delivered_at=NOW)

    assert await store.insert_admitted(row("h2", seq=2, follow_up_of="h1"), stale)

    first = await store.get("anna", "h1")
    assert first is not None and first.state is RowState.CLOSED and first.followed_up_by is None
