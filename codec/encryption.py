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
import os
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12


class CodecError(ValueError):
    """A key is missing, malformed, or does not decrypt a payload."""


class EncryptionCodec(PayloadCodec):
    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if current not in keys:
            raise CodecError(f"the current key id {current!r} is not among the keys ({', '.join(keys) or 'none'})")
        for key_id, key in keys.items():
            if len(key) != 32:
                raise CodecError(f"key {key_id!r} has {len(key)} bytes; AES-256 needs 32")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._current = current

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
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                decoded.append(payload)  # written before encryption was turned on
                continue
            key_id = payload.metadata.get(KEY_ID, b"").decode()
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise CodecError(f"no key {key_id!r} to decrypt a payload; add it to HELPER_CODEC_KEYS")
            nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
            try:
                decoded.append(Payload.FromString(cipher.decrypt(nonce, sealed, key_id.encode())))
            except InvalidTag:
                raise CodecError(f"a payload does not decrypt with key {key_id!r}") from None
        return decoded


def codec_from(keys: str | None, key_id: str | None) -> EncryptionCodec | None:
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
    return EncryptionCodec(parsed, key_id or next(iter(parsed)))


def data_converter(codec: PayloadCodec | None) -> DataConverter:
    """The runtime's one data converter: pydantic models, encrypted when a codec is given."""
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)


def new_key() -> str:
    """A fresh key, base64: `python -m codec key`."""
    return base64.b64encode(os.urandom(32)).decode()
