"""Who may read decoded payloads: the codec server's authentication and authorization (R39).

Two kinds of credential, either or both configured:

* an OIDC access token, as the Temporal Web UI sends it with "pass access token" on: a JWT signed by the
  identity provider, checked against its JWKS, its issuer and audience, and allowed by subject or group;
* the static HELPER_CODEC_TOKEN, for the `temporal` CLI (`--codec-auth "Bearer <token>"`).

Either way the request's X-Namespace must be one of the allowed namespaces. Without any credential configured
the server may only listen on a loopback address (see `startup_refusal`).

`Authorizer.check` may fetch the JWKS over HTTP (blocking): the server calls it in a thread.
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import logging
import threading
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlparse

import jwt

from config.settings import CodecServerSettings

log = logging.getLogger(__name__)

# Asymmetric algorithms only: `none` and HS* would let anyone holding the public key (or nothing) sign.
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")
CLOCK_LEEWAY_SECONDS = 30
JWKS_TIMEOUT_SECONDS = 5.0
# The JWK set is cached this long; an unknown kid refetches it at most once per cooldown (key rotation
# without letting tokens with made-up kids hammer the identity provider).
JWKS_CACHE_SECONDS = 300
JWKS_REFETCH_COOLDOWN_SECONDS = 30
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


class AuthConfigError(ValueError):
    """The auth settings are incomplete or contradictory; the server refuses to start."""


class AuthError(Exception):
    """A request is refused: 401 (no or invalid credential), 403 (not allowed), 503 (JWKS unreachable)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _unauthorized(message: str) -> AuthError:
    return AuthError(401, "unauthorized", message)


def _forbidden(message: str) -> AuthError:
    return AuthError(403, "forbidden", message)


@dataclasses.dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    jwks_url: str
    subjects: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    groups_claim: str = "groups"


@dataclasses.dataclass(frozen=True)
class AuthSettings:
    token: str | None = None
    oidc: OidcSettings | None = None
    namespaces: frozenset[str] = frozenset({"default"})

    @property
    def any_credential(self) -> bool:
        return self.token is not None or self.oidc is not None


@dataclasses.dataclass(frozen=True)
class Decision:
    """An accepted request: how it authenticated and as whom (never the credential itself)."""

    method: Literal["token", "oidc", "none"]
    principal: str
    namespace: str


def _comma_list(value: str | None) -> frozenset[str]:
    return frozenset(item.strip() for item in (value or "").split(",") if item.strip())


def auth_settings(codec: CodecServerSettings) -> AuthSettings:
    """Who may read, as the codec server's settings (HELPER_CODEC_*) describe it; raises AuthConfigError naming
    what is missing or contradictory."""
    token = (codec.token or "").strip() or None
    namespaces = _comma_list(codec.namespaces)
    if not namespaces:
        raise AuthConfigError("HELPER_CODEC_NAMESPACES is empty: name the namespaces whose payloads it decodes")
    issuer, audience, jwks_url = (
        (value or "").strip() for value in (codec.oidc_issuer, codec.oidc_audience, codec.oidc_jwks_url)
    )
    subjects = _comma_list(codec.oidc_subjects)
    groups = _comma_list(codec.oidc_groups)
    groups_claim = codec.oidc_groups_claim.strip() or "groups"
    if not issuer:
        needs_issuer = {
            "HELPER_CODEC_OIDC_AUDIENCE": audience,
            "HELPER_CODEC_OIDC_JWKS_URL": jwks_url,
            "HELPER_CODEC_OIDC_SUBJECTS": subjects,
            "HELPER_CODEC_OIDC_GROUPS": groups,
        }
        set_without_issuer = [name for name, value in needs_issuer.items() if value]
        if set_without_issuer:
            raise AuthConfigError(
                f"HELPER_CODEC_OIDC_ISSUER is not set, but {', '.join(set_without_issuer)} is: set the issuer too"
            )
        return AuthSettings(token=token, namespaces=namespaces)
    if not audience:
        raise AuthConfigError(
            "HELPER_CODEC_OIDC_AUDIENCE is not set: OIDC needs the audience the Web UI's access tokens carry"
        )
    if not jwks_url:
        raise AuthConfigError("HELPER_CODEC_OIDC_JWKS_URL is not set: OIDC needs the identity provider's JWKS URL")
    if urlparse(jwks_url).scheme not in ("http", "https"):
        raise AuthConfigError("HELPER_CODEC_OIDC_JWKS_URL must be an http(s) URL")
    if not subjects and not groups:
        raise AuthConfigError(
            "OIDC is on, but who may read? Set HELPER_CODEC_OIDC_SUBJECTS and/or HELPER_CODEC_OIDC_GROUPS"
        )
    oidc = OidcSettings(issuer, audience, jwks_url, subjects, groups, groups_claim)
    return AuthSettings(token=token, oidc=oidc, namespaces=namespaces)


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def startup_refusal(settings: AuthSettings, host: str) -> str | None:
    """Why the server must not start on `host` with these settings, in one line; None when it may."""
    if settings.any_credential or is_loopback(host):
        return None
    return (
        f"refusing to serve decoded payloads on {host} without authentication: set HELPER_CODEC_TOKEN "
        "(for the temporal CLI) and/or HELPER_CODEC_OIDC_ISSUER, HELPER_CODEC_OIDC_AUDIENCE, "
        "HELPER_CODEC_OIDC_JWKS_URL and HELPER_CODEC_OIDC_SUBJECTS or HELPER_CODEC_OIDC_GROUPS (for Web UI users), "
        "or bind to 127.0.0.1"
    )


def _bearer(authorization: str | None) -> str | None:
    scheme, _, credential = (authorization or "").strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        return None
    return credential


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """A claim by its name, or by a dotted path (Keycloak's `realm_access.roles`) when no claim has the name."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _groups_of(claims: Mapping[str, Any], claim_name: str) -> set[str]:
    value = _claim(claims, claim_name)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {item for item in value if isinstance(item, str)}
    return set()


# Our own words for PyJWT's refusals; the token itself never appears in a message.
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "the access token has expired"),
    (jwt.ImmatureSignatureError, "the access token is not valid yet"),
    (jwt.InvalidIssuerError, "the access token is from another issuer"),
    (jwt.InvalidAudienceError, "the access token is for another audience"),
    (jwt.MissingRequiredClaimError, "the access token lacks a required claim (exp, iss, aud, sub)"),
    (jwt.InvalidAlgorithmError, "the access token's algorithm is not allowed"),
    (jwt.InvalidSignatureError, "the access token's signature does not verify"),
)


class Authorizer:
    """Decides whether a request may use the codec. Pure apart from the JWKS fetch (blocking HTTP)."""

    def __init__(self, settings: AuthSettings, *, jwks_client: jwt.PyJWKClient | None = None) -> None:
        self.settings = settings
        self._jwks: jwt.PyJWKClient | None = None
        if settings.oidc is not None:
            self._jwks = jwks_client or jwt.PyJWKClient(
                settings.oidc.jwks_url,
                cache_jwk_set=True,
                lifespan=JWKS_CACHE_SECONDS,
                timeout=JWKS_TIMEOUT_SECONDS,
                cooldown_duration=JWKS_REFETCH_COOLDOWN_SECONDS,
            )
        self._jwks_fetched = threading.Event()

    @property
    def oidc_enabled(self) -> bool:
        return self._jwks is not None

    @property
    def jwks_fetched(self) -> bool:
        """Whether the JWKS was fetched at least once (for /readyz; a slow IdP does not fail the probes)."""
        return self._jwks_fetched.is_set()

    def warm_up(self) -> None:
        """Fetch the JWKS once ahead of the first request; failures only leave it to the first request."""
        if self._jwks is None:
            return
        try:
            self._jwks.get_signing_keys()
        except jwt.PyJWTError as error:
            log.warning("could not fetch the OIDC JWKS yet: %s", type(error).__name__)
        else:
            self._jwks_fetched.set()

    def check(self, authorization: str | None, namespace: str | None) -> Decision:
        """The decision for a request's Authorization and X-Namespace headers; raises AuthError when refused."""
        method, principal = self._authenticate(authorization)
        if namespace is None or namespace not in self.settings.namespaces:
            raise _forbidden(f"namespace {(namespace or '')[:100]!r} is not one this codec server decodes for")
        return Decision(method, principal, namespace)

    def _authenticate(self, authorization: str | None) -> tuple[Literal["token", "oidc", "none"], str]:
        if not self.settings.any_credential:
            return "none", "anonymous"  # only possible on a loopback address
        credential = _bearer(authorization)
        if credential is None:
            raise _unauthorized("a bearer token is needed (Authorization: Bearer ...)")
        token = self.settings.token
        if token is not None and hmac.compare_digest(credential.encode(), token.encode()):
            return "token", "static-token"
        if self.settings.oidc is None:
            raise _unauthorized("the bearer token is not valid")
        return "oidc", self._authorize_oidc(credential, self.settings.oidc)

    def _authorize_oidc(self, credential: str, oidc: OidcSettings) -> str:
        assert self._jwks is not None
        try:
            header = jwt.get_unverified_header(credential)
        except jwt.PyJWTError:
            raise _unauthorized("the bearer token is neither the static token nor a JWT") from None
        # Checked before any JWKS lookup, so `none` or HS* tokens never cost a fetch.
        if header.get("alg") not in ALLOWED_ALGORITHMS:
            raise _unauthorized("the access token's algorithm is not allowed")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise _unauthorized("the access token names no signing key (kid)")
        try:
            signing_key = self._jwks.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError:
            raise AuthError(503, "jwks_unavailable", "the identity provider's keys cannot be fetched now") from None
        except jwt.PyJWTError:
            raise _unauthorized("the access token is signed with a key the identity provider does not list") from None
        self._jwks_fetched.set()
        try:
            claims: dict[str, Any] = jwt.decode(
                credential,
                signing_key,
                algorithms=list(ALLOWED_ALGORITHMS),
                audience=oidc.audience,
                issuer=oidc.issuer,
                leeway=CLOCK_LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as error:
            reason = next((text for kind, text in _REASONS if isinstance(error, kind)), "the access token is invalid")
            raise _unauthorized(reason) from None
        subject = claims["sub"]
        if not isinstance(subject, str):
            raise _unauthorized("the access token's subject is not a string")
        if subject in oidc.subjects or _groups_of(claims, oidc.groups_claim) & oidc.groups:
            return subject
        raise _forbidden(f"subject {subject[:200]!r} is not allowed to read payloads (not listed, nor in a group)")
