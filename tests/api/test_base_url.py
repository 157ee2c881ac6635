"""``deps._base_url``: each answer's ``workflow-api`` (where the VMAPI client polls jobs) is
Starlette's ``request.base_url`` as text, kept by what it is built from instead of parsed for
every request."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from service.api import deps


def _request(**scope_items) -> Request:
    scope = {"type": "http", "method": "POST", "path": "/vms/x", "query_string": b"a=1",
             "headers": [], "scheme": "http", "server": ("127.0.0.1", 8080), "root_path": ""}
    scope.update(scope_items)
    return Request(scope)


@pytest.mark.parametrize("scope_items", [
    {},
    {"headers": [(b"host", b"vmapi.example:8080")]},
    {"headers": [(b"host", b"vmapi.example"), (b"host", b"other")]},
    {"scheme": "https", "server": ("10.0.0.1", 443)},
    {"server": ("::1", 8080)},
    {"server": ["testserver", 80]},
    {"root_path": "/api", "path": "/api/vms/x"},
    {"app_root_path": "/outer", "root_path": "/outer/inner"},
    {"headers": [(b"host", b"bad host:x")]},
], ids=str)
def test_it_is_starlettes_base_url_without_the_trailing_slash(scope_items):
    deps._BASE_URLS.clear()
    for _ in range(2):  # built, then kept
        assert deps._base_url(_request(**scope_items)) == str(
            _request(**scope_items).base_url).rstrip("/")


def test_what_it_keeps_is_bounded_whatever_hosts_clients_send():
    deps._BASE_URLS.clear()
    for n in range(deps._BASE_URLS_KEPT * 3):
        host = f"h{n}.example".encode()
        assert deps._base_url(_request(headers=[(b"host", host)])) == f"http://h{n}.example"
    assert len(deps._BASE_URLS) <= deps._BASE_URLS_KEPT
