"""``python -m serve_app create-key``'s check of the new key's owner, by the API's rules.

The key goes straight into the database, so the owner is checked as
``POST /v1/admin/keys`` checks it (the ``Identifier`` shape, reserved ``@`` ids, a user
key needs its user and other keys none) before anything is written: the CLI cannot
mint what the API refuses, such as a user key for ``@org`` that would read the
tenant's shared memories as its own.
"""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from serve_app.auth import check_key_owner
from serve_app.errors import ApiError
from serve_app.schemas import Identifier


def check(role: str, user_id: str | None) -> None:
    """SystemExit naming the problem when the API would refuse this key's owner."""
    try:
        if user_id is not None:
            TypeAdapter(Identifier).validate_python(user_id)
        check_key_owner(role, user_id)
    except ValidationError as exc:
        raise SystemExit(f"invalid --user-id {user_id!r}: {exc.errors()[0]['msg']}") from None
    except ApiError as exc:
        raise SystemExit(f"invalid key owner: {exc.message}") from None
