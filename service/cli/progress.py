"""The progress bars of long commands (``audit verify``, ``rebuild``, ``replay``): on stderr,
so stdout holds only the command's result, and always finished with their true totals."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
)


class _Bar(Progress):
    """A ``Progress`` left drawn when its block ends well, and cleared when it ends in an
    error: the command says what went wrong in its own line, which is then all its stderr
    holds (its bar was drawn again above that line, a second line, when stderr is a file)."""

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if exc_type is None:
            super().__exit__(exc_type, exc_val, exc_tb)
        elif not self.disable:
            # not Progress.stop, which ends the bar's line with a newline when stderr is no
            # terminal, a bar cleared or not
            self.live.transient = True
            self.live.stop()


def progress_bar(console: Console | None = None) -> Progress:
    """The progress bar every long command shows: the task's description, a bar, done/total
    and the time elapsed, drawn on ``console`` (stderr when None); cleared if the block it
    draws ends in an error (``_Bar``)."""
    return _Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=console or Console(stderr=True))


def finish(bar: Progress, task: TaskID, description: str | None = None) -> int:
    """End ``task`` at what was really done: its total becomes its count, so the bar is full
    and says how much there was (the total given up front is the log's head position, an
    index lookup: at least the number of events, more where positions have gaps, as on
    PostgreSQL). Returns that count."""
    done = int(next(t.completed for t in bar.tasks if t.id == task))
    fields: dict[str, Any] = {"total": done, "completed": done}
    if description is not None:
        fields["description"] = description
    bar.update(task, **fields)
    return done
