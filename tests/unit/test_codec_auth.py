"""Who may read decoded payloads: OIDC access tokens checked against a real JWKS over HTTP, the static token,
the allowed namespaces, and the start-up refusals (R39)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from codec.auth import (
    AuthConfigError,
    AuthError,
    Authorizer,
    AuthSettings,
    OidcSettings,
    auth_settings,
    startup_refusal,
)
from config.settings import Settings

ISSUER = "https://idp.example.test/realms/helpers"
AUDIENCE = "temporal-ui"
KID = "idp-key-1"
STATIC_TOKEN = "cli-static-token-0123456789"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class IdentityProvider:
    """An RSA key set served as a JWKS over real HTTP (a thread), and tokens signed with it."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.rogue_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # never published
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        self.jwks = {"keys": [{**jwk, "kid": KID, "alg": "RS256", "use": "sig"}]}
        self.fetches = 0
        provider = self

        class JwksHandler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider.fetches += 1
                body = json.dumps(provider.jwks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output quiet

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), JwksHandler)
        self.jwks_url = f"http://127.0.0.1:{self._server.server_address[1]}/jwks.json"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": [AUDIENCE, "account"],
            "sub": "alice",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
            "groups": ["readers"],
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(self, *, signing_key: rsa.RSAPrivateKey | None = None, kid: str | None = KID, **claims: Any) -> str:
        headers = {"kid": kid} if kid is not None else {}
        return jwt.encode(self.claims(**claims), signing_key or self.key, algorithm="RS256", headers=headers)

    def crafted(self, header: dict[str, Any], secret: bytes | None) -> str:
        """A token PyJWT would not sign: `alg: none` (no secret) or HS256 keyed with `secret`."""
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(self.claims()).encode())}"
        signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64url(signature)}"

    def settings(self, **overrides: Any) -> AuthSettings:
        oidc = OidcSettings(
            issuer=ISSUER,
            audience=AUDIENCE,
            jwks_url=self.jwks_url,
            subjects=overrides.pop("subjects", frozenset({"alice"})),
            groups=overrides.pop("groups", frozenset()),
            groups_claim=overrides.pop("groups_claim", "groups"),
        )
        return AuthSettings(oidc=oidc, **overrides)


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider()
    yield provider
    provider.close()


def _refusal(authorizer: Authorizer, authorization: str | None, namespace: str | None = "default") -> AuthError:
    with pytest.raises(AuthError) as refused:
        authorizer.check(authorization, namespace)
    return refused.value


def test_a_valid_access_token_is_accepted_as_its_subject(idp: IdentityProvider) -> None:
    """R39: a Web UI user's access token, signed by the IdP's key from its JWKS, for our issuer and audience,
    lets its listed subject read."""
    authorizer = Authorizer(idp.settings())
    decision = authorizer.check(f"Bearer {idp.token()}", "default")
    assert (decision.method, decision.principal, decision.namespace) == ("oidc", "alice", "default")
    assert authorizer.jwks_fetched


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"iss": "https://other-idp.example.test"}, "another issuer"),
        ({"aud": "some-other-app"}, "another audience"),
        ({"exp": -120}, "expired"),  # times are seconds from now, taken when the test runs
        ({"nbf": 120}, "not valid yet"),
        ({"sub": None}, "required claim"),
        ({"exp": None}, "required claim"),
    ],
)
def test_tokens_for_someone_else_or_out_of_date_are_refused(
    idp: IdentityProvider, claims: dict[str, Any], reason: str
) -> None:
    """R39: a token from another issuer, for another audience, expired, not yet valid, or without subject or
    expiry does not let anyone read (401, and the token never appears in the message)."""
    now = int(time.time())
    token = idp.token(**{k: now + v if k in ("exp", "nbf") and v is not None else v for k, v in claims.items()})
    refusal = _refusal(Authorizer(idp.settings()), f"Bearer {token}")
    assert (refusal.status, refusal.code) == (401, "unauthorized")
    assert reason in refusal.message
    assert token not in refusal.message


def test_the_clock_leeway_tolerates_a_little_skew(idp: IdentityProvider) -> None:
    """R39: a token that expired a few seconds ago (clock skew with the IdP) is still accepted."""
    assert Authorizer(idp.settings()).check(f"Bearer {idp.token(exp=int(time.time()) - 5)}", "default")


def test_a_token_signed_by_another_key_is_refused(idp: IdentityProvider) -> None:
    """R39: a token carrying the IdP's kid but signed by a key the IdP never published is refused."""
    refusal = _refusal(Authorizer(idp.settings()), f"Bearer {idp.token(signing_key=idp.rogue_key)}")
    assert refusal.status == 401 and "signature" in refusal.message


def test_a_token_naming_an_unknown_or_no_key_is_refused(idp: IdentityProvider) -> None:
    """R39: a token whose kid is not in the JWKS (or that names none) is refused."""
    authorizer = Authorizer(idp.settings())
    assert _refusal(authorizer, f"Bearer {idp.token(kid='made-up')}").status == 401
    assert _refusal(authorizer, f"Bearer {idp.token(kid=None)}").status == 401


def test_unsigned_and_algorithm_confusion_tokens_are_refused(idp: IdentityProvider) -> None:
    """R39: `alg: none`, and HS256 "signed" with the IdP's public key as the secret (algorithm confusion),
    are refused before any key is even looked up."""
    authorizer = Authorizer(idp.settings())
    unsigned = idp.crafted({"alg": "none", "typ": "JWT", "kid": KID}, None)
    confused = idp.crafted({"alg": "HS256", "typ": "JWT", "kid": KID}, idp.public_pem)
    for token in (unsigned, confused):
        refusal = _refusal(authorizer, f"Bearer {token}")
        assert refusal.status == 401 and "algorithm" in refusal.message


def test_a_subject_neither_listed_nor_in_a_listed_group_is_forbidden(idp: IdentityProvider) -> None:
    """R39: a valid token of someone not allowed to read gets 403, not the payloads."""
    refusal = _refusal(Authorizer(idp.settings()), f"Bearer {idp.token(sub='mallory')}")
    assert (refusal.status, refusal.code) == (403, "forbidden")


def test_a_member_of_an_allowed_group_may_read(idp: IdentityProvider) -> None:
    """R39: membership of an allowed group is enough, also through a configured (nested) groups claim."""
    by_group = Authorizer(idp.settings(subjects=frozenset(), groups=frozenset({"readers"})))
    assert by_group.check(f"Bearer {idp.token(sub='bob')}", "default").principal == "bob"
    assert _refusal(by_group, f"Bearer {idp.token(sub='bob', groups=['writers'])}").status == 403
    nested = Authorizer(
        idp.settings(subjects=frozenset(), groups=frozenset({"ops"}), groups_claim="realm_access.roles")
    )
    token = idp.token(sub="carol", realm_access={"roles": ["ops", "other"]})
    assert nested.check(f"Bearer {token}", "default").principal == "carol"


def test_a_namespace_that_is_not_allowed_is_forbidden(idp: IdentityProvider) -> None:
    """R39: even an allowed reader gets 403 for a namespace this codec server does not decode for."""
    authorizer = Authorizer(idp.settings(namespaces=frozenset({"helpers"})))
    assert authorizer.check(f"Bearer {idp.token()}", "helpers").namespace == "helpers"
    assert _refusal(authorizer, f"Bearer {idp.token()}", "default").status == 403
    assert _refusal(authorizer, f"Bearer {idp.token()}", None).status == 403


def test_the_static_token_is_accepted_alone_or_next_to_oidc(idp: IdentityProvider) -> None:
    """R39: the CLI's static token passes; with OIDC configured too, either credential passes."""
    static_only = Authorizer(AuthSettings(token=STATIC_TOKEN))
    assert static_only.check(f"Bearer {STATIC_TOKEN}", "default").method == "token"
    refusal = _refusal(static_only, "Bearer not-the-token")
    assert refusal.status == 401 and "not-the-token" not in refusal.message
    both = Authorizer(idp.settings(token=STATIC_TOKEN))
    assert both.check(f"bearer {STATIC_TOKEN}", "default").method == "token"
    assert both.check(f"Bearer {idp.token()}", "default").method == "oidc"
    assert _refusal(both, "Bearer not-a-jwt").status == 401


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer   ", f"Basic {STATIC_TOKEN}", STATIC_TOKEN])
def test_without_a_bearer_credential_the_request_is_unauthorized(authorization: str | None) -> None:
    """R39: no Authorization, an empty one, or another scheme is 401."""
    assert _refusal(Authorizer(AuthSettings(token=STATIC_TOKEN)), authorization).status == 401


def test_without_configured_credentials_only_the_namespace_is_checked() -> None:
    """R39: the loopback-only mode without auth still keeps to the allowed namespaces."""
    authorizer = Authorizer(AuthSettings())
    assert authorizer.check(None, "default").method == "none"
    assert _refusal(authorizer, None, "elsewhere").status == 403


def test_the_jwks_is_cached_between_requests(idp: IdentityProvider) -> None:
    """R39: the JWKS is fetched once and reused, not once per request."""
    authorizer = Authorizer(idp.settings())
    before = idp.fetches
    for _ in range(3):
        authorizer.check(f"Bearer {idp.token()}", "default")
    assert idp.fetches - before == 1


def test_an_unreachable_identity_provider_is_a_503_not_a_crash(idp: IdentityProvider) -> None:
    """R39: when the JWKS cannot be fetched, OIDC requests are refused with 503 and warm-up just logs."""
    closed = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens there any more
    settings = idp.settings()
    assert settings.oidc is not None
    oidc = OidcSettings(ISSUER, AUDIENCE, f"http://127.0.0.1:{port}/jwks", settings.oidc.subjects)
    authorizer = Authorizer(AuthSettings(oidc=oidc))
    authorizer.warm_up()
    assert not authorizer.jwks_fetched
    refusal = _refusal(authorizer, f"Bearer {idp.token()}")
    assert (refusal.status, refusal.code) == (503, "jwks_unavailable")


OIDC_ENV = {
    "HELPER_CODEC_OIDC_ISSUER": ISSUER,
    "HELPER_CODEC_OIDC_AUDIENCE": AUDIENCE,
    "HELPER_CODEC_OIDC_JWKS_URL": "https://idp.example.test/jwks",
    "HELPER_CODEC_OIDC_GROUPS": "readers, ops",
}


def auth_from(env: dict[str, str]) -> AuthSettings:
    return auth_settings(Settings.from_env(env).codec)


def test_settings_from_the_environment() -> None:
    """R39: the HELPER_CODEC_* variables describe the auth model; lists are comma separated."""
    settings = auth_from({**OIDC_ENV, "HELPER_CODEC_TOKEN": " tok ", "HELPER_CODEC_NAMESPACES": "helpers,default"})
    assert settings.token == "tok"
    assert settings.namespaces == {"helpers", "default"}
    assert settings.oidc is not None
    assert settings.oidc.groups == {"readers", "ops"} and settings.oidc.groups_claim == "groups"
    assert auth_from({}) == AuthSettings()
    assert auth_from({"HELPER_CODEC_TOKEN": ""}).token is None


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ("HELPER_CODEC_OIDC_AUDIENCE", "HELPER_CODEC_OIDC_AUDIENCE"),
        ("HELPER_CODEC_OIDC_JWKS_URL", "HELPER_CODEC_OIDC_JWKS_URL"),
        ("HELPER_CODEC_OIDC_ISSUER", "HELPER_CODEC_OIDC_ISSUER"),
        ("HELPER_CODEC_OIDC_GROUPS", "who may read"),
    ],
)
def test_a_half_configured_oidc_is_refused(missing: str, named: str) -> None:
    """R39: OIDC without audience, JWKS URL, issuer, or anyone allowed to read refuses to start, naming it."""
    env = {name: value for name, value in OIDC_ENV.items() if name != missing}
    with pytest.raises(AuthConfigError, match=named):
        auth_from(env)


def test_other_bad_settings_are_refused() -> None:
    """R39: an empty namespace list or a JWKS URL that is not http(s) refuses to start."""
    with pytest.raises(AuthConfigError, match="HELPER_CODEC_NAMESPACES"):
        auth_from({"HELPER_CODEC_NAMESPACES": " , "})
    with pytest.raises(AuthConfigError, match="http"):
        auth_from({**OIDC_ENV, "HELPER_CODEC_OIDC_JWKS_URL": "file:///etc/passwd"})


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.5"])
def test_without_auth_it_may_start_on_a_loopback_address(host: str) -> None:
    """R39: with no credential configured, only a loopback address is allowed."""
    assert startup_refusal(AuthSettings(), host) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "codec.example.internal", ""])
def test_without_auth_it_refuses_to_start_anywhere_else(host: str) -> None:
    """R39: with no credential configured, a non-loopback address refuses to start and says what to set."""
    refusal = startup_refusal(AuthSettings(), host)
    assert refusal is not None and "HELPER_CODEC_TOKEN" in refusal and "\n" not in refusal
    assert startup_refusal(AuthSettings(token=STATIC_TOKEN), host) is None
