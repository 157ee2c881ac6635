"""Integer query parameters are ASCII decimal digits (a ``-`` only to be refused as out of
range), as api.md says a version is: ``int()`` also read "+5", "5_0", " 5" and other scripts'
digits (tester D, bug 7: ``?version=%2B5`` was version 5)."""

from __future__ import annotations

import pytest

from projections.formats import decimal
from tests.api.helpers import assert_error, create_running_vm, error_fields

NOT_DECIMAL = ["+5", "5_0", " 5", "5 ", "٥", "５", "5\n", "0x5", "5.0", ""]


@pytest.mark.parametrize("text", NOT_DECIMAL)
def test_decimal_reads_ascii_digits_only(text) -> None:
    assert decimal(text) is None
    assert decimal("5") == 5 and decimal("-5") == -5


@pytest.mark.parametrize("text", NOT_DECIMAL)
def test_version_and_other_integer_parameters_refuse_what_is_not_digits(client, text) -> None:
    vm_uuid = create_running_vm(client)
    for path, name in ((f"/vms/{vm_uuid}", "version"), (f"/vms/{vm_uuid}/history", "limit"),
                       ("/jobs", "limit"), ("/vms", "limit"), ("/vms", "offset")):
        body = assert_error(client.get(path, params={name: text}), 409, "ValidationFailed")
        assert name in error_fields(body), (path, name, body)


def test_ram_filter_refuses_a_trailing_newline(client) -> None:
    body = assert_error(client.get("/vms", params={"ram": "128\n"}), 409, "ValidationFailed")
    assert error_fields(body) == {"ram": "Invalid"}, body
