"""A payload codec that encrypts every payload with AES-256-GCM before it reaches Temporal.

Tasks, outcomes and actions are personal content; with a key configured, Temporal's histories hold only
ciphertext, and only processes with the key (the worker, the starter, the codec server) can read them.
Keys carry ids so they can be rotated: new payloads use the current key, old ones name the key that
decrypts them, and a check derived from the key itself, so that two different keys under one id are told apart.

    HELPER_CODEC_KEYS="2026-11:<base64 of 32 bytes>,2026-05:<base64 ...>"   all keys that may be needed
    HELPER_CODEC_KEY_ID="2026-11"                                           the one new payloads use
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
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
# What a payload that cannot be read becomes in a worker: plaintext where the keys are required, or ciphertext of a
# key it lacks, of another key under the same id, or damaged. Decoded into a typed argument it is an
# `UnreadablePayload` naming why, so a workflow task is never failed (and retried for ever) by what a client sent:
# an update carrying it is rejected, a signal dropped, and a workflow whose start it is ends at once. Decoded
# untyped (failure details) it is a harmless marker: the server itself writes plaintext details into some events,
# such as the cancel of an activity that never started, and those must not fail a workflow task.
UNREADABLE = b"binary/unreadable"
UNREADABLE_REASON = "reason"
KEY_ID = "encryption-key-id"
# The first 8 bytes of HMAC-SHA256(key, KEY_CHECK_LABEL), hex: it names the key without revealing it.
KEY_CHECK = "encryption-key-check"
KEY_CHECK_LABEL = b"helper-runtime key check"
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


class UnreadablePayload(ValueError):
    """A payload this worker cannot read reached typed code: an update or a start carrying it is refused. Not a
    Temporal failure type, so a workflow never fails for it by itself: where the payload is its own start input,
    the workflow decides (workflows.start_input)."""


@dataclasses.dataclass(frozen=True)
class UnreadableValue:
    """What an untyped unreadable payload decodes to: why, and nothing of what was sent."""

    reason: str


def key_check(key: bytes) -> str:
    return hmac.new(key, KEY_CHECK_LABEL, hashlib.sha256).hexdigest()[:16]


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload; refuses unencrypted ones unless `allow_plaintext` (a migration window for
    histories written before encryption was turned on).

    A payload it cannot decrypt raises `CodecError`, which a client and the codec server report; a worker's codec
    (`in_place`) turns it into the UNREADABLE marker instead, since a raise there fails the workflow task and the
    server retries that task for ever, wedging the workflow."""

    def __init__(
        self, keys: Mapping[str, bytes], current: str, *, allow_plaintext: bool = False, in_place: bool = False
    ) -> None:
        if current not in keys:
            raise CodecError(f"the current key id {current!r} is not among the keys ({', '.join(keys) or 'none'})")
        for key_id, key in keys.items():
            if len(key) != 32:
                raise CodecError(f"key {key_id!r} has {len(key)} bytes; AES-256 needs 32")
        self._keys = dict(keys)
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._checks = {key_id: key_check(key).encode() for key_id, key in keys.items()}
        self._current = current
        self._allow_plaintext = allow_plaintext
        self._in_place = in_place

    def in_place(self) -> EncryptionCodec:
        """The same keys, turning what it cannot read into the UNREADABLE marker: a worker's codec."""
        return EncryptionCodec(self._keys, self._current, allow_plaintext=self._allow_plaintext, in_place=True)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self._current]
        metadata = {"encoding": ENCODING, KEY_ID: self._current.encode(), KEY_CHECK: self._checks[self._current]}
        encoded = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), self._current.encode())
            encoded.append(Payload(metadata=metadata, data=nonce + sealed))
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                if self._allow_plaintext:
                    decoded.append(payload)  # written before encryption was turned on
                    continue
                if payload != SERVER_NOT_STARTED:
                    log.warning("refused an unencrypted payload (%s)", payload.metadata.get("encoding", b"?")[:40])
                decoded.append(_unreadable("an unencrypted payload was refused: this runtime requires the codec keys"))
                continue
            try:
                decoded.append(self._decrypt(payload))
            except CodecError as error:
                if not self._in_place:
                    raise
                log.warning("refused a payload: %s", error)
                decoded.append(_unreadable(str(error)))
        return decoded

    def _decrypt(self, payload: Payload) -> Payload:
        # Payloads may come from any client of the codec server: every malformation is a CodecError, not a crash.
        try:
            key_id = payload.metadata.get(KEY_ID, b"").decode()
        except UnicodeDecodeError:
            raise CodecError("a payload's key id is not UTF-8 text") from None
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise CodecError(
                f"a payload is encrypted with key {key_id[:100]!r}, which this process does not have (its keys: "
                f"{', '.join(self._ciphers)}): HELPER_CODEC_KEYS differs between the process that sent it and this one"
            )
        check = payload.metadata.get(KEY_CHECK)
        if check is not None and check != self._checks[key_id]:
            theirs = check[:16].decode(errors="replace")
            raise CodecError(
                f"a payload is encrypted with another key under the id {key_id!r} (check {theirs}, this "
                f"process's {self._checks[key_id].decode()}): HELPER_CODEC_KEYS differs between the process that "
                "sent it and this one"
            )
        # Shorter than a nonce and a GCM tag (16 bytes): encode never wrote it, and AESGCM would raise.
        if len(payload.data) < NONCE_BYTES + 16:
            raise CodecError(f"a payload is too short to have been encrypted with key {key_id!r}")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plaintext = cipher.decrypt(nonce, sealed, key_id.encode())
        except InvalidTag:
            raise CodecError(f"a payload does not decrypt with key {key_id!r}: it was damaged or another key") from None
        try:
            return Payload.FromString(plaintext)
        except DecodeError:
            raise CodecError(f"a payload decrypted with key {key_id!r} is not a Temporal payload") from None


def _unreadable(reason: str) -> Payload:
    return Payload(metadata={"encoding": UNREADABLE, UNREADABLE_REASON: reason.encode()})


class _UnreadableConverter(EncodingPayloadConverter):
    @property
    def encoding(self) -> str:
        return UNREADABLE.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None  # never produced by encoding; only the codec's decode writes this encoding

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        reason = payload.metadata.get(UNREADABLE_REASON, b"").decode(errors="replace")
        if type_hint is None:
            return UnreadableValue(reason)
        raise UnreadablePayload(reason)


class RuntimePayloadConverter(PydanticPayloadConverter):
    """Pydantic models as JSON, plus the unreadable marker a worker's codec writes.

    The SDK builds a payload converter for every workflow activation and every new workflow run; the encoding
    converters are stateless but for the JSON one's cache of pydantic type adapters, so they are built once
    and shared: a new instance costs nothing, and each run finds the adapters already built."""

    _shared: ClassVar[dict[bytes, EncodingPayloadConverter] | None] = None

    def __init__(self) -> None:
        shared = RuntimePayloadConverter._shared
        if shared is None:
            super().__init__()
            unreadable = _UnreadableConverter()
            shared = RuntimePayloadConverter._shared = {**self.converters, UNREADABLE: unreadable}
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


def of_worker(converter: DataConverter) -> DataConverter:
    """A worker's data converter: the client's, with a codec that marks what it cannot read (EncryptionCodec)."""
    codec = converter.payload_codec
    if not isinstance(codec, EncryptionCodec):
        return converter
    return dataclasses.replace(converter, payload_codec=codec.in_place())


def new_key() -> str:
    """A fresh key, base64: `python -m codec key`."""
    return base64.b64encode(os.urandom(32)).decode()
