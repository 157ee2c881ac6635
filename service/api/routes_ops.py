"""Operations routes: ``/ping`` (database and projection lag) and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from service import metrics as process_metrics
from service.api.deps import services_of
from service.api.errors import UnavailableError

router = APIRouter()


@router.get("/ping")
def ping(request: Request) -> JSONResponse:
    """Health: the database answers, and how far each read model lags the log (events)."""
    services = services_of(request)
    try:
        head = services.projections.head()
        positions = services.projections.positions()
    except Exception as error:  # noqa: BLE001 - any failure to reach the database is a 503
        raise UnavailableError(f"database unreachable: {type(error).__name__}") from error
    return JSONResponse({
        "status": "OK",
        "backend": services.settings.backend,
        "head_position": head,
        "projection_lag": {name: head - position for name, position in positions.items()},
    })


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """Prometheus metrics: this process's, and the fleet's jobs from ``job_view``."""
    fleet = request.app.state.metrics_registry
    return Response(process_metrics.exposition(fleet), media_type=CONTENT_TYPE_LATEST)
