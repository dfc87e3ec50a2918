"""The runtime's payload converter (codec/encryption.py): the SDK makes one for every workflow activation, so
the encoding converters are built once and shared, and each new one decodes with type adapters already built;
what it converts is unchanged, the unreadable marker included."""

from __future__ import annotations

import pytest
from temporalio.api.common.v1 import Payload

from codec.encryption import UNREADABLE, RuntimePayloadConverter, UnreadablePayload, UnreadableValue
from domain.book import EventState
from domain.messages.activities import OfferEvent, OfferResult


def test_new_converters_share_the_type_adapters_already_built() -> None:
    first, second = RuntimePayloadConverter(), RuntimePayloadConverter()
    offer = OfferEvent(owner="vic", key="vic-e1", helper_ids=["h1"], language="en", attempts=2)
    [payload] = first.to_payloads([offer])
    assert first.from_payloads([payload], [OfferEvent]) == [offer]
    json = second.converters[b"json/plain"]
    hits = json._type_adapter.cache_info().hits  # type: ignore[attr-defined]
    assert second.from_payloads([payload], [OfferEvent]) == [offer]
    assert json._type_adapter.cache_info().hits == hits + 1  # type: ignore[attr-defined]


def test_each_converter_converts_as_before() -> None:
    converter = RuntimePayloadConverter()
    result = OfferResult(state=EventState.DELIVERED, receipt_id="r1")
    [payload] = converter.to_payloads([result])
    assert payload.metadata["encoding"] == b"json/plain"
    assert RuntimePayloadConverter().from_payloads([payload], [OfferResult]) == [result]
    assert RuntimePayloadConverter().from_payloads(converter.to_payloads([None, 3, "x"])) == [None, 3, "x"]
    unreadable = Payload(metadata={"encoding": UNREADABLE, "reason": b"no key 'k9'"})
    with pytest.raises(UnreadablePayload, match="no key 'k9'"):
        RuntimePayloadConverter().from_payloads([unreadable], [OfferResult])
    assert RuntimePayloadConverter().from_payloads([unreadable]) == [UnreadableValue("no key 'k9'")]
