"""The ``vmledger`` command line (``service.cli.app``)."""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``vmledger`` console script and of ``python -m service``: runs
    ``service.cli.app.main``, imported here so that a Ctrl-C while it loads (about a second
    and a half of imports) ends the command as one after it does, quietly with status 130
    (128 + SIGINT), never with a ``KeyboardInterrupt`` traceback. The console script imports
    only this package, which imports nothing but the stop signals' handling (standard
    library only): a command that handles them keeps its handling to the process's end,
    which ``end_process`` makes (docs/operations.md, "Stopping processes")."""
    from service.cli.stop_signals import end_process, hold_until_exit

    hold_until_exit()
    try:
        from service.cli.app import main as run

        run()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except SystemExit as ended:
        end_process(ended.code)
        raise
    end_process(None)
