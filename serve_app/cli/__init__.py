"""Command-line subcommands that talk to a running service over HTTP."""

from __future__ import annotations

import argparse
import os


def add_service_args(parser: argparse.ArgumentParser, key: str = "API key") -> None:
    """``--url`` and ``--key`` of a subcommand that calls the service (defaults from
    $MEMSERVE_URL and $MEMSERVE_API_KEY); ``key`` says which key it needs."""
    parser.add_argument("--url", default=os.environ.get("MEMSERVE_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--key",
        default=os.environ.get("MEMSERVE_API_KEY"),
        help=f"{key} (default: $MEMSERVE_API_KEY)",
    )
