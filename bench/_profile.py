"""Sampling profiles of running processes with py-spy (``pip install py-spy`` in your own
environment; it is not a project dependency). Used by the scripts' ``--profile DIR`` option:
a profiled run is slower than an unprofiled one, so its figures are only for reading the
profile (the JSON line says ``"profiled": true``).

Each process gets a collapsed-stack file (``py-spy record --format raw``; by default idle
threads are left out, though py-spy counts a thread waiting in psycopg's ``Connection.wait``
as busy; ``idle=True`` keeps every sample of every thread, for a wall-clock view);
``summarize`` prints the functions with the most samples, inclusive (the function or anything
it called) and self (the function's own code).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^:()]*)(?::\d+)?\)$")


def py_spy() -> str:
    """The py-spy binary beside this interpreter, or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        # call it before any work (the scripts do): raised in a timer thread, it would be lost
        raise SystemExit("--profile needs py-spy: pip install py-spy (not a project dependency)")
    return found


class Profiler:
    """``py-spy record`` attached to ``pids`` for ``seconds``, writing into ``out_dir``.
    ``gil=True`` keeps only the samples of the thread holding the GIL: where the Python CPU
    goes, without the waits that dominate an every-thread profile (it pauses the process to
    read, so it is not ``--nonblocking``)."""

    def __init__(self, out_dir: str | Path, label: str, pids: list[int], seconds: float,
                 rate: int = 200, *, idle: bool = False, gil: bool = False):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.files = [self.out_dir / f"{label}-{pid}.txt" for pid in pids]
        self.processes = [
            subprocess.Popen(
                [py_spy(), "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
                 "--rate", str(rate), "--format", "raw", "-o", str(path),
                 *(["--gil"] if gil else ["--nonblocking"]),
                 *(["--idle", "--threads"] if idle else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for pid, path in zip(pids, self.files, strict=True)
        ]

    def wait(self) -> list[Path]:
        for process in self.processes:
            process.wait()
        return [f for f in self.files if f.exists()]


def _function(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    file = match.group("file")
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in file:
            file = file.split(marker, 1)[1]
    return f"{match.group('name')} ({file})"


def load(files: list[Path]) -> tuple[Counter[str], Counter[str], int]:
    """Inclusive and self sample counts per function over ``files``, and the total."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for path in files:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [_function(f) for f in stack.split(";")]
            # py-spy puts a "process ..." / "thread ..." frame first in some modes: skip them.
            frames = [f for f in frames if not f.startswith(("process ", "thread ", "pid "))]
            if not frames:
                continue
            total += count
            for name in set(frames):
                inclusive[name] += count
            own[frames[-1]] += count
    return inclusive, own, total


def summarize(files: list[Path], title: str, top: int = 25) -> str:
    """A text table of the top functions by inclusive and by self samples."""
    inclusive, own, total = load(files)
    if not total:
        return f"{title}: no samples"
    lines = [f"{title}: {total} samples over {len(files)} process(es)", "  inclusive:"]
    lines += [f"    {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    lines.append("  self:")
    lines += [f"    {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    return "\n".join(lines)


def share(files: list[Path], needles: dict[str, str]) -> dict[str, float]:
    """For each label, the share of samples with a frame containing its needle."""
    counts: Counter[str] = Counter()
    total = 0
    for path in files:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not count_text.isdigit():
                continue
            total += int(count_text)
            for label, needle in needles.items():
                if needle in stack:
                    counts[label] += int(count_text)
    return {label: round(counts[label] / total, 3) if total else 0.0 for label in needles}


if __name__ == "__main__":
    # python bench/_profile.py FILE... : summarize existing collapsed-stack files
    print(summarize([Path(a) for a in sys.argv[1:]], "profile", top=40))
