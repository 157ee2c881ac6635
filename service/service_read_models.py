"""The read models the service keeps, as one list: the composition root's runner, the
audit's fresh folds and the schema check all take them from here."""

from __future__ import annotations

import functools
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Transcoder

from domain.folding import fold_stored
from projections.analytics import AnalyticsView
from projections.job_view import JobView
from projections.network_view import NetworkView
from projections.runner import ReadModel
from projections.server_view import ServerView
from projections.vm_view import VmView
from projections.volume_mounts import VolumeMounts

_READ_MODELS = (VmView, JobView, ServerView, AnalyticsView, VolumeMounts, NetworkView)
# Their names, known without a database (``vmledger rebuild --help`` lists them).
READ_MODEL_NAMES = tuple(model.name for model in _READ_MODELS)


def read_models(transcoder: Transcoder, app: Any = None) -> list[ReadModel]:
    """Fresh instances of every read model the service keeps (the runner's, and the audit's
    fresh folds), over an event store whose events ``transcoder`` encodes (the app's
    ``mapper.transcoder``). With ``app`` (the runner's), ``vm_view`` replaces a row's folded
    state it cannot use by a fold of the VM's stream from the log (``fold_from_log``); the
    audit's scratch folds only read rows they wrote, and go without."""
    refold = functools.partial(fold_from_log, app) if app is not None else None
    return [VmView.fresh(transcoder, refold) if model is VmView else model.fresh(transcoder)
            for model in _READ_MODELS]


def fold_from_log(app: Any, vm_id: UUID, version: int) -> Any:
    """VM ``vm_id`` folded from its stream's first stored event to ``version``, from the
    events alone: it replaces a fold found edited, so neither a snapshot nor a cache is used.
    None when the stream has no event up to ``version``; a gap raises ``StreamGapError``
    (``domain.chain``) and an event the fold cannot apply ``UnfoldableEventError``, as any
    fold of stored events does (``domain.folding``)."""
    return fold_stored(None, app.events.get(vm_id, lte=version))
