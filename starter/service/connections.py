"""What the service holds for its whole life: one store reader (a pool on PostgreSQL) and one Temporal client with
the runtime's codec, each opened on first use, so the service starts while Temporal or the store is still down and
a read never waits for Temporal (R43, R47)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from config.settings import Settings
from starter.reads import StoreReader, open_store
from starter.service import metrics
from store.reads import RowReader

if TYPE_CHECKING:  # loaded with the first write
    from temporalio.client import Client

    from starter.backpressure import WriteGate
    from starter.client import HelperClient


class Connections:
    """The store and Temporal, connected lazily and once; a failed connect is tried again by the next request."""

    def __init__(self, settings: Settings, store_pool_size: int, temporal: Client | None = None) -> None:
        """`temporal`: a client already connected (a test's dev server), else one is connected on first write."""
        self.settings = settings
        self.store_pool_size = store_pool_size
        self._store: RowReader | None = None
        self._temporal: Client | None = temporal
        self._reader: StoreReader | None = None
        self._writer: HelperClient | None = None
        self._store_lock = asyncio.Lock()
        self._temporal_lock = asyncio.Lock()

    @property
    def temporal_connected(self) -> bool:
        return self._temporal is not None

    async def reader(self) -> StoreReader:
        """The reads: the store alone."""
        if self._reader is None:
            async with self._store_lock:
                if self._reader is None:
                    self._store = await open_store(self.settings, self.store_pool_size)
                    self._reader = StoreReader(self.settings, self._store)
        return self._reader

    @property
    def gate(self) -> WriteGate | None:
        """The writes' gate, once Temporal is connected (starter.backpressure)."""
        return None if self._writer is None else self._writer.gate

    async def writer(self) -> HelperClient:
        """The writes: the store and Temporal."""
        if self._writer is None:
            reader = await self.reader()
            async with self._temporal_lock:
                if self._writer is None:
                    from starter.client import HelperClient, connect_temporal_client

                    if self._temporal is None:
                        self._temporal = await connect_temporal_client(self.settings)
                    self._writer = HelperClient(self.settings, reader.store, self._temporal, metrics.observe_write)
        return self._writer

    async def aclose(self) -> None:
        """Close the store; the Temporal client holds no resource that needs closing."""
        if self._store is not None:
            await self._store.close()
            self._store = self._reader = self._writer = None
