"""FastAPI's native OpenTelemetry: off unless ``VMLEDGER_OPENTELEMETRY`` asks for it (then each
request is a span through the process's configured tracer provider; docs/operations.md)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace

from service.api.app import create_app


class RecordingTracerProvider(trace.TracerProvider):
    """A configured provider (not the API's deferred default) that notes each span's name."""

    def __init__(self) -> None:
        self.spans: list[str] = []

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        spans = self.spans

        class Recording(trace.NoOpTracer):
            def start_span(self, name: str, *args: Any, **kwargs: Any) -> trace.Span:
                spans.append(name)
                return super().start_span(name, *args, **kwargs)

        return Recording()


@pytest.fixture
def provider(monkeypatch) -> RecordingTracerProvider:
    recording = RecordingTracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: recording)
    return recording


@pytest.mark.parametrize("enabled", [False, True])
def test_requests_are_traced_only_when_opentelemetry_is_on(services, provider, enabled):
    settings = services.settings.model_copy(update={"opentelemetry": enabled})
    # on PostgreSQL no runner runs in this app: nothing may lag for /ping to answer 200
    services.projections.catch_up()
    with TestClient(create_app(settings, services=services)) as http:
        assert http.get("/ping").status_code == 200
    assert bool(provider.spans) is enabled
