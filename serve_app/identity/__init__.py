"""End users signed in by their platform's identity provider: tokens (JWTs) of a
tenant's trusted issuers act as user keys (docs/identity.md).

``issuers`` is the settings group, ``jwks`` fetches and caches public keys safely,
``verifier`` turns a token into a ``Principal``. Built once per Ingress replica by
the composition root (``composition.token_verifier``).
"""
