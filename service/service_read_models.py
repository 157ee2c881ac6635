"""The read models the service keeps, as one list: the composition root's runner, the
audit's fresh folds and the schema check all take them from here."""

from __future__ import annotations

from eventsourcing.persistence import Transcoder

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


def read_models(transcoder: Transcoder) -> list[ReadModel]:
    """Fresh instances of every read model the service keeps (the runner's, and the audit's
    fresh folds), over an event store whose events ``transcoder`` encodes (the app's
    ``mapper.transcoder``)."""
    return [model.fresh(transcoder) for model in _READ_MODELS]
