"""The payload codec (codec/encryption.py): what it cannot read is named by its key id and told apart by the key's
check; a client and the codec server get the error, a worker the marker its workflows refuse (R39, R52)."""

from __future__ import annotations

import base64
import os

import pytest
from temporalio.api.common.v1 import Payload

from codec.encryption import (
    KEY_CHECK,
    UNREADABLE,
    CodecError,
    EncryptionCodec,
    RuntimePayloadConverter,
    UnreadablePayload,
    key_check,
)
from domain.messages.activities import OfferEvent

PLAIN = Payload(metadata={"encoding": b"json/plain"}, data=b'{"owner": "vic"}')


def _codec(key_id: str = "local", key: bytes | None = None, **options: bool) -> EncryptionCodec:
    return EncryptionCodec({key_id: key or os.urandom(32)}, key_id, **options)


async def test_a_payload_carries_its_key_id_and_check_and_round_trips() -> None:
    key = os.urandom(32)
    codec = _codec(key=key)
    [sealed] = await codec.encode([PLAIN])
    assert sealed.metadata["encryption-key-id"] == b"local"
    assert sealed.metadata[KEY_CHECK] == key_check(key).encode()
    assert base64.b64encode(key) not in sealed.SerializeToString()
    assert await codec.decode([sealed]) == [PLAIN]


async def test_a_payload_written_before_checks_existed_still_decrypts() -> None:
    codec = _codec()
    [sealed] = await codec.encode([PLAIN])
    del sealed.metadata[KEY_CHECK]
    assert await codec.decode([sealed]) == [PLAIN]


async def test_another_key_under_the_same_id_is_told_apart_by_its_check() -> None:
    their_key, our_key = os.urandom(32), os.urandom(32)
    [sealed] = await _codec(key=their_key).encode([PLAIN])
    with pytest.raises(CodecError, match="another key under the id 'local'") as refused:
        await _codec(key=our_key).decode([sealed])
    assert key_check(their_key) in str(refused.value) and key_check(our_key) in str(refused.value)


async def test_a_key_id_it_lacks_and_damaged_ciphertext_are_named() -> None:
    ours = _codec("local")
    [foreign] = await _codec("old").encode([PLAIN])
    with pytest.raises(CodecError, match=r"key 'old', which this process does not have .*local"):
        await ours.decode([foreign])
    [sealed] = await ours.encode([PLAIN])
    damaged = Payload(metadata=sealed.metadata, data=sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))
    with pytest.raises(CodecError, match="does not decrypt with key 'local'"):
        await ours.decode([damaged])


async def test_a_workers_codec_marks_what_it_cannot_read_and_typed_code_refuses_it() -> None:
    """In a worker a raise would fail the workflow task for ever; the marker is refused by typed code instead, and
    decodes untyped (failure details) to a harmless value."""
    ours = _codec().in_place()
    [foreign] = await _codec().encode([PLAIN])
    plaintext = Payload(metadata={"encoding": b"json/plain"}, data=b"{}")
    marked, refused = await ours.decode([foreign, plaintext])
    assert marked.metadata["encoding"] == UNREADABLE and not marked.data
    with pytest.raises(UnreadablePayload, match="another key under the id 'local'"):
        RuntimePayloadConverter().from_payloads([marked], [OfferEvent])
    with pytest.raises(UnreadablePayload, match="unencrypted payload was refused"):
        RuntimePayloadConverter().from_payloads([refused], [OfferEvent])
