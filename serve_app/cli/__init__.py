"""Command-line subcommands that talk to a running service over HTTP."""
