"""The progress bar every long command shows (rebuild, audit verify, replay)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def progress_bar(console: Console | None = None) -> Progress:
    """A bar with the task's description, a bar, done/total and the time elapsed; drawn on
    ``console`` (rich's default, stdout, when None)."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console,
    )
