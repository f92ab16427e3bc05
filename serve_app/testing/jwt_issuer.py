"""A real local token issuer for tests: keys generated here, a JWKS over HTTP on 127.0.0.1.

It is what a platform's identity provider is to memserve: it signs tokens (RS256,
ES256 and EdDSA keys, each with a ``kid``) and publishes the public keys at
``/jwks.json``. Failure modes for the attack suite: ``hang`` (the answer never comes),
``status`` (an HTTP error), ``huge`` (an endless body: 50 MB unless the reader stops),
``rotate()`` (new keys; old tokens' kids vanish). ``requests`` counts JWKS fetches.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

HUGE_BYTES = 50 * 1024 * 1024


def _new_keys() -> dict[str, tuple[str, Any]]:
    """kid -> (alg, private key): one RSA, one P-256, one Ed25519."""
    stamp = uuid.uuid4().hex[:8]
    return {
        f"rsa-{stamp}": ("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        f"ec-{stamp}": ("ES256", ec.generate_private_key(ec.SECP256R1())),
        f"ed-{stamp}": ("EdDSA", ed25519.Ed25519PrivateKey.generate()),
    }


def public_jwk(kid: str, alg: str, private: Any) -> dict[str, Any]:
    tool = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}[alg]
    jwk = tool.to_jwk(private.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


class LocalIssuer:
    def __init__(self) -> None:
        self.keys = _new_keys()
        self.mode = "ok"  # ok | hang | status | huge
        self.status = 503
        self.requests = 0
        self.huge_sent = 0  # bytes of the last huge answer written before the reader left
        self._stop = threading.Event()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                issuer.requests += 1
                if issuer.mode == "hang":
                    issuer._stop.wait(30)
                    return
                if issuer.mode == "status":
                    self.send_error(issuer.status)
                    return
                if issuer.mode == "huge":
                    self._huge()
                    return
                body = json.dumps(issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _huge(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()  # no Content-Length: the reader must count itself
                chunk = b'{"keys": [' + b" " * 65526
                issuer.huge_sent = 0
                with contextlib.suppress(OSError):
                    while issuer.huge_sent < HUGE_BYTES and not issuer._stop.is_set():
                        self.wfile.write(chunk)
                        issuer.huge_sent += len(chunk)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.issuer = self.url + "/realms/test"
        self.jwks_url = self.url + "/jwks.json"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> LocalIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def jwks(self) -> dict[str, Any]:
        return {"keys": [public_jwk(kid, alg, key) for kid, (alg, key) in self.keys.items()]}

    def rotate(self) -> None:
        """New keys replace the old ones (tokens signed before name kids that are gone)."""
        self.keys = _new_keys()

    def kid(self, alg: str = "RS256") -> str:
        return next(k for k, (a, _) in self.keys.items() if a == alg)

    def config(self, audience: str, **extra: Any) -> dict[str, Any]:
        """This issuer as an entry of a tenant's ``identity.issuers``."""
        return {"issuer": self.issuer, "audiences": [audience], "jwks_url": self.jwks_url, **extra}

    def claims(self, user: str, audience: str, lifetime_s: int = 600, **extra: Any) -> dict:
        now = int(time.time())
        return {
            "iss": self.issuer,
            "aud": audience,
            "sub": user,
            "iat": now,
            "exp": now + lifetime_s,
            **extra,
        }

    def sign(
        self,
        claims: dict[str, Any],
        alg: str = "RS256",
        kid: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> str:
        kid = kid or self.kid(alg)
        private = self.keys[kid][1] if kid in self.keys else self.keys[self.kid(alg)][1]
        return jwt.encode(claims, private, algorithm=alg, headers={"kid": kid, **(headers or {})})

    def token(self, user: str, audience: str, alg: str = "RS256", **extra: Any) -> str:
        return self.sign(self.claims(user, audience, **extra), alg)
