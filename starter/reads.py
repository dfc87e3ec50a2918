"""The starter's reads: rows, outcomes and usage straight from the store, with no Temporal client loaded, so
Iva's per-turn reads answer fast and work while no worker runs (R27, R31, R43)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from config.settings import Settings
from config.store_address import StoreAddress
from domain.audit import AUDIT_PAGE_MAX, AuditCursor, AuditPage, OwnerWait
from domain.rows import HelperRow, HelperView, RowState
from protocol.errors import InvalidRequest, Unavailable, unknown_helper
from starter.inputs import check_ids, scrub
from store.reads import RowReader, open_bare, open_sqlite
from store.records import UsageLine
from store.results import ResultDirectories
from store.revisions import NoStore, SchemaNotCurrent


class UsageTotal(BaseModel):
    model: str
    helpers: int = 0
    steps: int = 0
    work_tokens: int = 0
    input_tokens: int = 0


class UsageReport(BaseModel):
    owner: str
    helpers: list[UsageLine]
    by_model: list[UsageTotal]


def _unopened(address: StoreAddress, error: BaseException) -> Unavailable:
    """A store that does not open: what to check in the message, the driver's own words in `cause`."""
    return Unavailable(
        scrub(
            f"the store at {address.described} cannot be opened: nothing was read or written. Try again once it "
            "answers there (is it running, and does HELPER_STORE_URL name it with its credentials?)",
            address,
        ),
        cause=scrub(f"{type(error).__name__}: {error}", address),
    )


def _not_ready(settings: Settings, error: NoStore | SchemaNotCurrent) -> Unavailable:
    """No store where the settings point (a read creates none), or one whose schema is behind: the store's address
    in both cases, and for a missing store how to point at the right one."""
    address = settings.store
    shown = address.absolute().described
    if isinstance(error, NoStore):
        return Unavailable(scrub(f"no store at {shown}: {settings.store_pointer()}", address), shown=(shown,))
    return Unavailable(scrub(f"{shown}: {error}", address), shown=(shown,))


def open_sqlite_reader(settings: Settings) -> RowReader | None:
    """The configured SQLite store on the stdlib driver, opened without an event loop; None when the store is not
    one the bare reader takes, or its driver failed in a way SQLAlchemy's path words (then use `open_store`)."""
    import sqlite3

    address = settings.store
    if address.bare != "sqlite":
        return None
    try:
        return open_sqlite(address)
    except (NoStore, SchemaNotCurrent) as error:
        raise _not_ready(settings, error) from None
    except (sqlite3.Error, OSError):
        return None  # the store cannot be opened: SQLAlchemy's path says why, in the words it always has


async def open_store(settings: Settings, pool_size: int | None = None) -> RowReader:
    """The configured store's reads, or Unavailable naming where it is (never its password); a store that is not
    there is never created. A store the bare
    readers take (`StoreAddress.bare`) is read without SQLAlchemy (R43); a driver error is worded by SQLAlchemy's
    path. With `pool_size`, a PostgreSQL store is read through a pool of that many connections (the HTTP service)."""
    address = settings.store
    if address.bare is not None:
        try:
            return await open_bare(address, pool_size)
        except (NoStore, SchemaNotCurrent) as error:
            raise _not_ready(settings, error) from None
        except (OSError, TimeoutError) as error:
            if address.bare == "postgresql":  # a server down or silent: SQLAlchemy passes these on unwrapped
                raise _unopened(address, error) from None
        except Exception:
            pass  # the driver's own error (a database that is missing, a bad password): SQLAlchemy words it below
    from store.helper_store import HelperStore

    try:
        return (await HelperStore.connect(address)).reads
    except (NoStore, SchemaNotCurrent) as error:
        raise _not_ready(settings, error) from None
    except Exception as error:
        raise _unopened(address, error) from None


class StoreReader:
    """Reads for one configuration: `open`, read, `aclose`. `HelperClient` adds the writes."""

    def __init__(self, settings: Settings, store: RowReader) -> None:
        self.settings = settings
        self.store = store
        self.results = ResultDirectories(settings.results_dir)

    @classmethod
    async def open(cls, settings: Settings) -> StoreReader:
        return cls(settings, await open_store(settings))

    async def aclose(self) -> None:
        await self.store.close()

    # --- reads: straight from the store, no worker needed -------------------------------------------

    async def usage(self, owner: str) -> UsageReport:
        """Usage per helper with its model, and totals per model (R31); kept after rows expire."""
        check_ids(owner, [])
        records = await self.store.usage(owner)
        totals: dict[str, UsageTotal] = {}
        for record in records:
            total = totals.setdefault(record.model, UsageTotal(model=record.model))
            total.helpers += 1
            total.steps += record.steps
            total.work_tokens += record.work_tokens
            total.input_tokens += record.input_tokens
        return UsageReport(
            owner=owner,
            helpers=records,
            by_model=sorted(totals.values(), key=lambda t: t.model),
        )

    async def list_helpers(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperView]:
        check_ids(owner, [])
        return await self.store.views(owner, states)

    async def show(self, owner: str, helper_id: str) -> HelperView:
        check_ids(owner, [helper_id])
        row = await self.store.get(owner, helper_id)
        if row is None:
            raise unknown_helper(helper_id)
        ahead = await self.store.ahead(owner, row.seq) if row.state is RowState.WAITING else None
        view = self._view(row, ahead=ahead)
        view.last_message = row.last_message or None
        view.full_text = self.results.read_text(Path(row.result_dir))
        view.session_id = row.session_id
        return view

    async def unreported(self, owner: str) -> list[HelperView]:
        """Finalized outcomes not yet delivered, with summaries, for the chat's next instruction (R27)."""
        return await self.list_helpers(owner, [RowState.UNREPORTED])

    async def waits(self, owner: str) -> list[OwnerWait]:
        """Every wait of the owner's that still takes an answer, across helpers, from the store (R56)."""
        check_ids(owner, [])
        return await self.store.waits(owner)

    async def audit(
        self, owner: str, helper_id: str | None = None, before: str | None = None, limit: int = 50
    ) -> AuditPage:
        """The records of the owner's waits that ended, newest first, a page at a time (R56): `before` is the `next`
        token of the page before; `helper_id` keeps one helper's."""
        check_ids(owner, [helper_id] if helper_id is not None else [])
        if not 1 <= limit <= AUDIT_PAGE_MAX:
            raise InvalidRequest(f"limit: {limit} records; give 1-{AUDIT_PAGE_MAX}")
        try:
            cursor = AuditCursor.parse(before) if before is not None else None
        except ValueError as error:
            raise InvalidRequest(f"before: {error}") from None
        records = await self.store.wait_records(owner, helper_id, before=cursor, limit=limit + 1)
        following = AuditCursor.after(records[limit - 1]).token() if len(records) > limit else None
        return AuditPage(owner=owner, records=records[:limit], next=following)

    def _view(self, row: HelperRow, ahead: int | None) -> HelperView:
        # The view is the row's public part: everything but the task, the limits and the writer's bookkeeping.
        return HelperView.model_validate({**row.model_dump(exclude={"last_message"}), "ahead": ahead})
