"""A payload codec that encrypts every payload with AES-256-GCM before it reaches Temporal.

Tasks, outcomes and actions are personal content; with a key configured, Temporal's histories hold only
ciphertext, and only processes with the key (the worker, the starter, the codec server) can read them.
Keys carry ids so they can be rotated: new payloads use the current key, old ones name the key that
decrypts them.

    HELPER_CODEC_KEYS="2026-11:<base64 of 32 bytes>,2026-05:<base64 ...>"   all keys that may be needed
    HELPER_CODEC_KEY_ID="2026-11"                                           the one new payloads use
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
    PayloadCodec,
)

ENCODING = b"binary/encrypted"
# What a refused plaintext payload becomes. Decoded into a typed argument it is an error, so a plaintext signal
# is dropped and a plaintext update or start refused: nothing a key-less client sends is acted on (R39).
# Decoded untyped (failure details) it is a harmless marker: the server itself writes plaintext details into
# some events, such as the cancel of an activity that never started, and those must not fail a workflow task.
REFUSED_PLAINTEXT = b"binary/plaintext-refused"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
# The one plaintext payload the worker is handed that none of ours wrote: the Temporal server writes it as the
# details of an activity's cancel when the activity had not started (its first attempt not yet polled, or a retry
# waiting out its backoff, as every follow does after a store, core or server restart), and the helper's ending
# cancels such an activity. It carries nothing of the helper's; it is refused like any plaintext, without the
# warning that would send an operator looking for a client without keys.
SERVER_NOT_STARTED = Payload(metadata={"encoding": b"json/plain"}, data=b'"ACTIVITY_ID_NOT_STARTED"')


log = logging.getLogger(__name__)


class CodecError(ValueError):
    """A key is missing, malformed, or does not decrypt a payload."""


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload; refuses unencrypted ones unless `allow_plaintext` (a migration window for
    histories written before encryption was turned on)."""

    def __init__(self, keys: Mapping[str, bytes], current: str, *, allow_plaintext: bool = False) -> None:
        if current not in keys:
            raise CodecError(f"the current key id {current!r} is not among the keys ({', '.join(keys) or 'none'})")
        for key_id, key in keys.items():
            if len(key) != 32:
                raise CodecError(f"key {key_id!r} has {len(key)} bytes; AES-256 needs 32")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._current = current
        self._allow_plaintext = allow_plaintext

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self._current]
        encoded = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), self._current.encode())
            encoded.append(
                Payload(metadata={"encoding": ENCODING, KEY_ID: self._current.encode()}, data=nonce + sealed)
            )
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        # Payloads may come from any client of the codec server: every malformation is a CodecError, not a crash.
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                if self._allow_plaintext:
                    decoded.append(payload)  # written before encryption was turned on
                    continue
                if payload != SERVER_NOT_STARTED:
                    log.warning("refused an unencrypted payload (%s)", payload.metadata.get("encoding", b"?")[:40])
                decoded.append(Payload(metadata={"encoding": REFUSED_PLAINTEXT}))
                continue
            try:
                key_id = payload.metadata.get(KEY_ID, b"").decode()
            except UnicodeDecodeError:
                raise CodecError("a payload's key id is not UTF-8 text") from None
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise CodecError(f"no key {key_id[:100]!r} to decrypt a payload; add it to HELPER_CODEC_KEYS")
            # Shorter than a nonce and a GCM tag (16 bytes): encode never wrote it, and AESGCM would raise.
            if len(payload.data) < NONCE_BYTES + 16:
                raise CodecError(f"a payload is too short to have been encrypted with key {key_id!r}")
            nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
            try:
                plaintext = cipher.decrypt(nonce, sealed, key_id.encode())
            except InvalidTag:
                raise CodecError(f"a payload does not decrypt with key {key_id!r}") from None
            try:
                decoded.append(Payload.FromString(plaintext))
            except DecodeError:
                raise CodecError(f"a payload decrypted with key {key_id!r} is not a Temporal payload") from None
        return decoded


class PlaintextRefused(ValueError):
    """A payload arrived unencrypted where the keys are required."""


@dataclasses.dataclass(frozen=True)
class RefusedPayload:
    """What an untyped refused payload decodes to; it carries nothing of what was sent."""


class _RefusedPlaintextConverter(EncodingPayloadConverter):
    @property
    def encoding(self) -> str:
        return REFUSED_PLAINTEXT.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None  # never produced by encoding; only the codec's decode writes this encoding

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        if type_hint is None:
            return RefusedPayload()
        raise PlaintextRefused("an unencrypted payload was refused: this runtime requires the codec keys")


class RuntimePayloadConverter(PydanticPayloadConverter):
    """Pydantic models as JSON, plus the refused-plaintext marker the codec writes.

    The SDK builds a payload converter for every workflow activation and every new workflow run; the encoding
    converters are stateless but for the JSON one's cache of pydantic type adapters, so they are built once
    and shared: a new instance costs nothing, and each run finds the adapters already built."""

    _shared: ClassVar[dict[bytes, EncodingPayloadConverter] | None] = None

    def __init__(self) -> None:
        shared = RuntimePayloadConverter._shared
        if shared is None:
            super().__init__()
            refused = _RefusedPlaintextConverter()
            shared = RuntimePayloadConverter._shared = {**self.converters, refused.encoding.encode(): refused}
        self.converters = shared


def codec_from(keys: str | None, key_id: str | None, *, allow_plaintext: bool = False) -> EncryptionCodec | None:
    """The codec the settings describe, or None when no keys are set (payloads stay in clear)."""
    if not keys:
        return None
    parsed: dict[str, bytes] = {}
    for item in keys.split(","):
        name, separator, encoded = item.strip().partition(":")
        if not separator or not name:
            raise CodecError("HELPER_CODEC_KEYS must be id:base64key pairs separated by commas")
        try:
            parsed[name] = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise CodecError(f"HELPER_CODEC_KEYS: key {name!r} is not valid base64") from None
    return EncryptionCodec(parsed, key_id or next(iter(parsed)), allow_plaintext=allow_plaintext)


def data_converter(codec: PayloadCodec | None) -> DataConverter:
    """The runtime's one data converter: pydantic models, encrypted when a codec is given."""
    if codec is None:
        return pydantic_data_converter
    # Failure messages and stack traces go into encoded attributes, so they are encrypted too (R39).
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=RuntimePayloadConverter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def new_key() -> str:
    """A fresh key, base64: `python -m codec key`."""
    return base64.b64encode(os.urandom(32)).decode()
