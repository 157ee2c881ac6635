"""The ``vmledger`` command line (``service.cli.app``)."""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``vmledger`` console script and of ``python -m service``: runs
    ``service.cli.app.main``, imported here so that a Ctrl-C while it loads (about a second
    and a half of imports) ends the command as one after it does, quietly with status 130
    (128 + SIGINT), never with a ``KeyboardInterrupt`` traceback. The console script imports
    only this package, which imports nothing."""
    try:
        from service.cli.app import main as run

        run()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
