"""A rebuild whose read models are built in several processes, then switched together.

The read models are split into groups (``split``: by ``ReadModel.rebuild_weight``, heaviest
first into the lightest group; with two processes ``vm_view`` alone and the other five
together). The rebuilding process builds the first group itself and each other group is
built in a child process (``multiprocessing``'s *spawn*: no pooled connection or thread of
the parent is inherited), which opens its own runner on the same database (``open_runner``,
a picklable callable the service gives); each reads and decodes the log itself and builds
its group's shadows with their own tracking rows, exactly as a serial rebuild builds them
(``rebuild.build_beside``). Once its own group is built the parent waits for every child,
and only then switches every read model (``rebuild.switch_all``), as a serial rebuild does.

A child that fails (an exception, or it dies) fails the rebuild: the parent's own build and
the other children are stopped and nothing is switched; the live tables keep serving, and
the next rebuild drops the shadows left beside. A child whose parent is gone (killed, even
with SIGKILL) ends itself at once, so that no build outlives the rebuild's lock. Each process reads and decodes the whole
log: more CPU in all than one process, so it is faster only where a core would otherwise be
idle (docs/performance.md, "P3 in session 6").
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from projections.read_model import ReadModel
from projections.rebuild import Runner, build_beside, switch_all

# How often the parent looks whether a child died without saying so (seconds).
_POLL_S = 0.2
# A child's exit status once its parent is gone.
_PARENT_GONE = 1

OpenRunner = Callable[[], AbstractContextManager[Runner]]


class RebuildFailed(RuntimeError):
    """A process of a parallel rebuild failed; nothing was switched."""


def split(read_models: Sequence[ReadModel], processes: int) -> list[list[ReadModel]]:
    """``read_models`` in at most ``processes`` non-empty groups of about equal
    ``rebuild_weight``: the heaviest first, each into the lightest group so far (ties: the
    first); each group keeps the given order."""
    groups: list[list[ReadModel]] = [[] for _ in range(max(1, processes))]
    weights = [0.0] * len(groups)
    for read_model in sorted(read_models, key=lambda rm: -rm.rebuild_weight):
        lightest = weights.index(min(weights))
        groups[lightest].append(read_model)
        weights[lightest] += read_model.rebuild_weight
    order = {read_model.name: n for n, read_model in enumerate(read_models)}
    return [sorted(group, key=lambda rm: order[rm.name]) for group in groups if group]


def rebuild_in_processes(runner: Runner, lives: Sequence[ReadModel], open_runner: OpenRunner,
                         processes: int, progress: Callable[[int], None] | None = None) -> int:
    """Rebuild ``lives`` as ``rebuild.rebuild_beside`` does, their builds split over
    ``processes`` processes: this one builds the first group with ``runner``, a child
    process each of the others, opening its runner with ``open_runner()``; then switch each
    through ``runner``. Returns how many events were applied in all. ``progress(n)`` is
    called as the slowest group moves, with ``n`` log events (over the whole rebuild the
    ``n`` add up to the log events the slowest group applied, as a serial rebuild's do).
    Raises ``RebuildFailed`` when a child fails, after stopping the others (and this
    process's own build); nothing is switched then."""
    own, *others = split(lives, processes)
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    children = [context.Process(target=_build_group, name=f"vmledger-rebuild-{n}", daemon=True,
                                args=(open_runner, [rm.name for rm in group], n, messages,
                                      runner.rebuild_batch_size))
                for n, group in enumerate(others, start=1)]
    for child in children:
        child.start()
    relay = _Relay([own, *others], children, messages, progress)
    try:
        total = build_beside(runner, own, lambda events: relay.moved(0, events))
        total += relay.finish(0, total)
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()
            child.join()
        messages.close()
    return total + switch_all(runner, lives)


class _Relay:
    """What the groups of a parallel rebuild have done (group 0 is this process's, the
    others its children's, which say so through ``messages``), and the progress of the
    slowest group, passed on to ``progress``."""

    def __init__(self, groups: Sequence[Sequence[ReadModel]], children: Sequence[Any],
                 messages: Any, progress: Callable[[int], None] | None):
        self.groups, self.children, self.messages = groups, children, messages
        self.progress = progress
        self.applied = [0] * len(groups)  # log events each group has applied so far
        self.totals: dict[int, int] = {}  # events applied in all, of each group done
        self.reported = 0

    def moved(self, n: int, events: int) -> None:
        """Group ``n`` applied a batch of ``events`` log events; take in what the children
        said meanwhile (``RebuildFailed`` if one failed)."""
        self.applied[n] += events
        self._take(block=False)
        self._report()

    def finish(self, n: int, total: int) -> int:
        """Group ``n`` is done, having applied ``total`` events in all; wait until every
        child is done too and return their totals."""
        self.totals[n] = total
        self._report()
        while len(self.totals) < len(self.groups):
            self._take(block=True)
            self._report()
        return sum(applied for m, applied in self.totals.items() if m != n)

    def _take(self, *, block: bool) -> None:
        """Take the children's messages waiting (with ``block``, at least one); a child that
        ended without saying it was done fails the rebuild (``RebuildFailed``)."""
        while True:
            # Looked at before reading: what a child said before it ended is in the pipe by
            # then, so a child ended here and still not done once the queue is empty failed.
            ended = [n for n, child in enumerate(self.children, start=1)
                     if n not in self.totals and child.exitcode is not None]
            try:
                kind, n, value = self.messages.get(block=block, timeout=_POLL_S)
            except queue.Empty:
                for n in ended:
                    raise RebuildFailed(f"rebuilding {_names(self.groups[n])}: its process "
                                        f"ended with exit code {self.children[n - 1].exitcode}")
                if not block:
                    return
                continue
            if kind == "failed":
                said, error = value
                raise RebuildFailed(f"rebuilding {_names(self.groups[n])} failed:\n{said}"
                                    ) from error
            if kind == "done":
                self.totals[n] = value
            else:
                self.applied[n] += value
            block = False

    def _report(self) -> None:
        going = [self.applied[m] for m in range(len(self.groups)) if m not in self.totals]
        slowest = min(going) if going else max(self.applied)
        if self.progress and slowest > self.reported:
            self.progress(slowest - self.reported)
            self.reported = slowest


def _names(group: Sequence[ReadModel]) -> str:
    return ", ".join(read_model.name for read_model in group)


def _build_group(open_runner: OpenRunner, names: Sequence[str], n: int, messages: Any,
                 batch_size: int) -> None:
    """A child process: build read models ``names`` beside with a runner of its own, in
    batches of ``batch_size`` (the parent runner's ``rebuild_batch_size``), telling the
    parent ``("progress", n, events)`` after each batch, then ``("done", n, applied)``, or
    ``("failed", n, (traceback, error))``, the error itself when it pickles (else None), so
    that the parent's ``RebuildFailed`` is raised from it (the command tells a database lost
    from a bug by it). Ends itself as soon as its parent is gone (``_end_with_parent``)."""
    _end_with_parent()
    try:
        with open_runner() as runner:
            runner.rebuild_batch_size = batch_size
            lives = [runner.read_models[name] for name in names]
            total = build_beside(runner, lives,
                                 lambda events: messages.put(("progress", n, events)))
    except BaseException as error:  # noqa: BLE001 - every failure is the parent's to report
        messages.put(("failed", n, (traceback.format_exc(), _picklable(error))))
        messages.close()
        messages.join_thread()  # the message must reach the parent before the exit
        raise SystemExit(1) from None
    messages.put(("done", n, total))


def _picklable(error: BaseException) -> BaseException | None:
    """``error`` if it survives pickling (without its chain: pickle drops it), else None."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any error's own pickling may fail any way
        return None
    return error


def _end_with_parent() -> None:
    """End this child process as soon as its parent is gone, however the parent ended (a
    SIGKILL, an out-of-memory kill): a child left building raced the next rebuild over the
    same shadows once the parent's rebuild lock was gone with it (a deadlock, or "another
    runner moved the position past 0 first"). A daemon thread waits on the parent's
    sentinel (*spawn*'s pipe from the parent, which reads as closed once no process holds
    its other end), then ends the process at once: its open transaction is rolled back as
    its connection closes, and the next rebuild drops the shadows it left."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not a child (a test calling it in-process)
        return

    def watch() -> None:
        parent.join()
        os._exit(_PARENT_GONE)

    threading.Thread(target=watch, name="vmledger-rebuild-parent-watch", daemon=True).start()
