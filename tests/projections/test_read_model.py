"""A batch's read models: every read sent before any answer is read (one round trip for all of
them in a PostgreSQL pipeline: docs/performance.md, P5), then each writes in turn."""

from __future__ import annotations

from projections.read_model import ReadModel, apply_together


class Recording(ReadModel):
    """Notes in ``log`` when its read is sent, its answer read, and its write or apply run."""

    tables = ()

    def __init__(self, name: str, log: list[str], *, reads: bool = True):
        self.name, self.log, self.reads = name, log, reads

    def create_statements(self, db):
        return []

    def read(self, tx, events):
        if not self.reads:
            return None
        self.log.append(f"{self.name} sent")

        def answer():
            self.log.append(f"{self.name} answered")
            return len(events)
        return answer

    def write(self, tx, events, stored):
        self.log.append(f"{self.name} wrote {stored}")

    def apply(self, tx, events):
        if self.reads:
            return super().apply(tx, events)
        self.log.append(f"{self.name} applied")


class OnlyApply:
    """A read model in the duck-typed form the runner also takes (tests/integration's)."""

    def __init__(self, log: list[str]):
        self.log = log

    def apply(self, tx, events):
        self.log.append("d applied")


def test_every_read_is_sent_before_any_answer_is_read_then_each_writes_in_turn():
    log: list[str] = []
    models = [Recording("a", log), Recording("b", log, reads=False), Recording("c", log),
              OnlyApply(log)]
    apply_together(None, models, [(1, "e1"), (2, "e2")])
    assert log == ["a sent", "c sent", "a answered", "a wrote 2", "b applied",
                   "c answered", "c wrote 2", "d applied"]


def test_a_read_model_on_its_own_reads_then_writes():
    log: list[str] = []
    Recording("a", log).apply(None, [(1, "e1")])
    assert log == ["a sent", "a answered", "a wrote 1"]
