"""The activity that offers one system event to the owner's chat when it is idle (R26)."""

from __future__ import annotations

from temporalio import activity

from clients.chat_client import ChatClient, ChatError, ChatUncertain
from contracts.chat_api import SystemEvent
from domain.book import EventKind, EventState
from domain.messages.activities import OfferEvent, OfferResult, WithdrawnEvent
from domain.texts import text
from observability import recording
from protocol.names import OFFER_CHAT_EVENT, WITHDRAW_CHAT_EVENT
from store.helper_store import HelperStore


def event_text(offer: OfferEvent) -> str:
    """The event's text in the owner's language: outcomes ready, or a wait's reminder or expiry naming what it asked
    (an expired authorization is said to be unanswered, never denied)."""
    helper_ids = ", ".join(offer.helper_ids)
    if offer.kind is EventKind.READY or offer.waits_for is None:
        return text("event.ready", offer.language, helper_ids=helper_ids)
    return text(f"event.{offer.kind.value}.{offer.waits_for}", offer.language, helper_ids=helper_ids, about=offer.about)


class ChatActivities:
    def __init__(self, store: HelperStore, chat: ChatClient) -> None:
        self.store = store
        self.chat = chat

    @activity.defn(name=OFFER_CHAT_EVENT)
    async def offer_chat_event(self, offer: OfferEvent) -> OfferResult:
        """Ask whether the chat is idle; if so, send the event. `delivered` only with the chat's receipt."""
        attempts = offer.attempts + 1
        # An attempt may take its whole timeout: the store shows it under way meanwhile.
        await self._record(offer, EventState.ATTEMPTING, attempts)
        try:
            if not await self.chat.is_idle(offer.owner):
                await self._record(offer, EventState.PENDING, attempts, error="chat busy")
                return OfferResult(state=EventState.PENDING, busy=True)
            receipt = await self.chat.send_event(
                offer.owner,
                SystemEvent(key=offer.key, helper_ids=offer.helper_ids, text=event_text(offer), kind=offer.kind.value),
            )
        except ChatUncertain as error:
            await self._record(offer, EventState.UNCERTAIN, attempts, error=str(error))
            return OfferResult(state=EventState.UNCERTAIN, error=str(error))
        except ChatError as error:
            await self._record(offer, EventState.FAILED, attempts, error=str(error))
            return OfferResult(state=EventState.FAILED, error=str(error))
        await self._record(offer, EventState.DELIVERED, attempts, receipt_id=receipt.event_id)
        return OfferResult(state=EventState.DELIVERED, receipt_id=receipt.event_id)

    @activity.defn(name=WITHDRAW_CHAT_EVENT)
    async def withdraw_chat_event(self, withdrawn: WithdrawnEvent) -> None:
        """None of the event's outcomes is unreported any more (each was closed, or read and delivered): it is
        never offered again (R22, R26), and the store says so."""
        await self.store.set_event_state(withdrawn.owner, withdrawn.key, EventState.WITHDRAWN.value)
        recording.chat_delivery(EventState.WITHDRAWN.value)

    async def _record(
        self,
        offer: OfferEvent,
        state: EventState,
        attempts: int,
        error: str | None = None,
        receipt_id: str | None = None,
    ) -> None:
        await self.store.record_event(
            owner=offer.owner,
            key=offer.key,
            helper_ids=offer.helper_ids,
            state=state.value,
            attempts=attempts,
            receipt_id=receipt_id,
            last_error=error,
        )
        recording.chat_delivery(state.value)
