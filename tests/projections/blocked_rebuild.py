"""``vmledger rebuild --processes 2`` whose child process blocks as soon as it starts, having
written its pid to the file named by ``VMLEDGER_TEST_CHILD_PID``: a rebuild caught in the
middle, for the tests that stop its parent (tests/projections/test_rebuild_signals.py).
Run as ``python -m tests.projections.blocked_rebuild`` with ``VMLEDGER_DATABASE_URL`` set."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from service.container import RebuildRunner


@dataclass(frozen=True)
class BlockedRunner(RebuildRunner):
    """A child's runner that never comes: the child says its pid, then waits forever."""

    @contextlib.contextmanager
    def __call__(self) -> Iterator[object]:  # type: ignore[override]
        path = Path(os.environ["VMLEDGER_TEST_CHILD_PID"])
        path.with_suffix(".tmp").write_text(str(os.getpid()))
        path.with_suffix(".tmp").rename(path)  # whole, or not there
        threading.Event().wait()
        yield None


if __name__ == "__main__":
    import service.container
    from service.cli.app import main

    service.container.RebuildRunner = BlockedRunner  # type: ignore[misc]
    sys.argv = ["vmledger", "rebuild", "--processes", "2"]
    main()
