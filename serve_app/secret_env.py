"""Secrets stay out of Ray's runtime env: each process reads them from its own node.

Ray shows a job's runtime env in its dashboard and API, so the admin and bootstrap
keys, the database DSN and the LLM key must not travel there. Every process (the
launcher, each replica on each node) reads them from its environment or from the
file named by ``MEMSERVE_SECRETS_FILE`` (``NAME=value`` lines, mode 0600), loaded
by ``get_settings`` without overriding variables already set.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping, MutableMapping
from pathlib import Path

log = logging.getLogger(__name__)

SECRETS_FILE_VAR = "MEMSERVE_SECRETS_FILE"
SECRET_VARS = frozenset(
    {
        "MEMSERVE_DATABASE_URL",
        "MEMSERVE_BOOTSTRAP_KEY",
        "MEMSERVE_ADMIN_KEY",
        "MEMSERVE_LLM_API_KEY",
    }
)
_SECRET_SUFFIXES = ("_API_KEY", "_PASSWORD", "_SECRET", "_TOKEN", "_DSN")


def is_secret(name: str) -> bool:
    return name in SECRET_VARS or name.endswith(_SECRET_SUFFIXES)


def runtime_env_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``MEMSERVE_*`` settings every replica needs, without a single secret."""
    return {k: v for k, v in environ.items() if k.startswith("MEMSERVE_") and not is_secret(k)}


def parse_secrets(text: str) -> dict[str, str]:
    """``NAME=value`` lines (``#`` comments, blank lines, optional quotes, ``export``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name.strip()] = value
    return out


def load_secrets_file(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the ``MEMSERVE_*`` variables of the secrets file that are not set yet.

    Returns the names set now (never their values, which are never logged).
    """
    env = os.environ if environ is None else environ
    path = env.get(SECRETS_FILE_VAR)
    if not path:
        return []
    file = Path(path)
    try:
        mode = file.stat().st_mode
        text = file.read_text()
    except OSError as exc:
        raise RuntimeError(f"{SECRETS_FILE_VAR}={path} cannot be read: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s is readable by group/others; chmod 600 it", path)
    loaded = []
    for name, value in parse_secrets(text).items():
        if name.startswith("MEMSERVE_") and name != SECRETS_FILE_VAR and name not in env:
            env[name] = value
            loaded.append(name)
    return loaded
