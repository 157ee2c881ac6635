"""Operations endpoints and the envelope every response shares: /ping, /metrics, API version
negotiation, x-request-id and the body size limit (api.md, "Versioning", "Errors")."""

from __future__ import annotations

import os

import pytest

from prometheus_client.parser import text_string_to_metric_families

from tests.api.helpers import OWNER, assert_error, create_running_vm, vm_body


def test_ping_reports_the_log_head_and_each_read_models_lag(client, services) -> None:
    create_running_vm(client)
    response = client.get("/ping")
    assert response.status_code == 200
    body = response.json()
    head = services.commands.head_position()
    assert body["head_position"] == head > 0
    assert set(body["projection_lag"]) >= {"vm_view", "job_view"}
    for name, lag in body["projection_lag"].items():
        assert isinstance(lag, int) and 0 <= lag <= head, name


def test_ping_answers_vmapis_health_fields_beside_its_own(client) -> None:
    """VMAPI's /ping (lib/endpoints/ping.js) answers ``healthy``, ``pid`` and
    ``pingErrors``; a health check written for it reads them (a tester: we had none)."""
    body = client.get("/ping").json()
    assert body["healthy"] is True
    assert body["pid"] == os.getpid()  # the test client serves in this process
    assert body["pingErrors"] == {}
    assert body["status"] == "OK"


def test_an_unreachable_database_is_a_503_saying_unhealthy_and_why(client, services,
                                                                   monkeypatch) -> None:
    def refuse() -> int:
        raise OSError("connection refused")

    monkeypatch.setattr(services.projections, "head", refuse)
    response = client.get("/ping")
    body = assert_error(response, 503, "Unavailable")
    assert response.headers["retry-after"]
    assert body["healthy"] is False
    assert body["pid"] == os.getpid()
    assert body["pingErrors"] == {"database": "database unreachable: connection refused"}


def test_metrics_are_served_in_the_prometheus_text_format(client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = list(text_string_to_metric_families(response.text))
    assert families, "no metric at all"


def test_no_header_star_a_version_1_range_or_vmapis_own_line_is_served_version_1(client) -> None:
    for accept_version in (None, "1", "~1", "1.0.0", "1.x", "*", "~9", "9.x"):
        headers = {"Accept-Version": accept_version} if accept_version else {}
        response = client.get("/ping", headers=headers)
        assert response.status_code == 200
        assert response.headers["Api-Version"] == "1.0.0", accept_version


def test_a_range_admitting_version_2_is_served_version_2(client) -> None:
    for accept_version in ("~2", "2.x", "2", ">=1", "2.0.0", "1 || 2"):
        response = client.get("/ping", headers={"Accept-Version": accept_version})
        assert response.status_code == 200
        assert response.headers["Api-Version"] == "2.0.0", accept_version


def test_an_unsatisfiable_version_is_refused_listing_the_supported_ones(client) -> None:
    for accept_version in ("~3", "3.x", "0.1.0", "nonsense"):
        response = client.get("/vms", headers={"Accept-Version": accept_version})
        body = assert_error(response, 400, "InvalidVersion")
        assert body["supported"] == ["1.0.0", "2.0.0"], accept_version


def test_an_accept_version_with_a_huge_number_is_refused_not_a_500(client) -> None:
    response = client.get("/ping", headers={"Accept-Version": "9" * 4301})
    assert_error(response, 400, "InvalidVersion")


def test_every_response_carries_a_request_id_and_echoes_the_one_given(client) -> None:
    given = client.get("/ping", headers={"x-request-id": "req-1234"})
    assert given.headers["x-request-id"] == "req-1234"
    generated = [client.get("/ping").headers["x-request-id"] for _ in range(2)]
    assert all(generated) and generated[0] != generated[1]
    # error answers too, whichever layer refuses
    for response in (
        client.get("/vms/3d1b9c1c-7d55-4a8e-b2a8-0a4e5f1d2c3b"),
        client.get("/vms", params={"bogus": "1"}),
        client.get("/ping", headers={"Accept-Version": "~7"}),
    ):
        assert response.status_code >= 400
        assert response.headers.get("x-request-id")


def test_the_request_id_is_recorded_in_the_cause_of_the_events(client) -> None:
    response = client.post("/vms", json=vm_body(), headers={"x-request-id": "trace-me"})
    assert response.status_code == 202
    history = client.get(f"/vms/{response.json()['vm_uuid']}/history").json()
    assert history[0]["cause"]["request_id"] == "trace-me"
    assert history[0]["cause"]["api_version"] == "1.0.0"


def test_a_body_over_the_limit_is_refused_with_413_and_appends_nothing(client, services) -> None:
    limit = services.settings.max_body_bytes
    head = services.commands.head_position()
    big = vm_body(customer_metadata={"blob": "x" * (limit + 10)})
    response = client.post("/vms", json=big)
    assert_error(response, 413, "PayloadTooLarge")
    assert response.headers.get("x-request-id")
    assert services.commands.head_position() == head


@pytest.mark.parametrize("declared", ["9" * 5000, "0" * 5000 + "1" + "0" * 20, "\u00b2"])
def test_a_content_length_int_cannot_read_is_refused_not_a_500(client, services, declared
                                                                ) -> None:
    # "²" is a digit to str.isdigit, not to int
    head = services.commands.head_position()
    response = client.post("/vms", content=b"{}", headers={
        "content-type": "application/json", "content-length": declared.encode("latin-1")})
    assert 400 <= response.status_code < 500, response.text
    assert services.commands.head_position() == head


def test_a_chunked_body_over_the_limit_is_refused_with_413_too(client, services) -> None:
    # No Content-Length: the limit must hold on the bytes actually received.
    limit = services.settings.max_body_bytes
    head = services.commands.head_position()
    payload = ('{"owner_uuid": "%s", "brand": "joyent", "ram": 256, '
               '"customer_metadata": {"blob": "%s"}}' % (OWNER, "x" * (limit + 10))).encode()

    def chunks():
        for start in range(0, len(payload), 65_536):
            yield payload[start:start + 65_536]

    response = client.post("/vms", content=chunks(),
                           headers={"content-type": "application/json"})
    assert_error(response, 413, "PayloadTooLarge")
    assert services.commands.head_position() == head


def test_metrics_count_requests_by_route_template_and_status(client) -> None:
    from prometheus_client import REGISTRY

    labels = {"route": "/vms/{vm_uuid}", "status": "404"}
    before = REGISTRY.get_sample_value("vmledger_http_requests_total", labels) or 0
    client.get("/vms/6c8a8f2e-1a8d-4b9e-9a51-1b6b6e3a0c99")
    assert REGISTRY.get_sample_value("vmledger_http_requests_total", labels) == before + 1
    text = client.get("/metrics").text
    assert 'vmledger_http_requests_total{route="/vms/{vm_uuid}",status="404"}' in text
