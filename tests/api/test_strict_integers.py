"""Integer query parameters are ASCII decimal digits (a ``-`` only to be refused as out of
range), as api.md says a version is: ``int()`` also read "+5", "5_0", " 5" and other scripts'
digits (tester D, bug 7: ``?version=%2B5`` was version 5)."""

from __future__ import annotations

import pytest

from projections.formats import decimal
from service.api.params import TOO_MANY_DIGITS
from tests.api.helpers import assert_error, create_running_vm, create_vm, error_fields

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


LONG_ONE = "0" * 25 + "1"  # 1, in 26 digits


def test_an_integer_of_too_many_digits_says_so_not_its_range(client) -> None:
    # found by a tester: /stats/stuck?older_than=<26 digits of value 1> was refused with
    # "must be 0 to 1000000000", which 1 is
    vm_uuid = create_vm(client)["vm_uuid"]
    for path, name in (("/stats/stuck", "older_than"), ("/stats/stuck", "limit"),
                       (f"/vms/{vm_uuid}", "version"), (f"/vms/{vm_uuid}/history", "limit"),
                       ("/jobs", "limit"), ("/vms", "limit"), ("/vms", "offset")):
        body = assert_error(client.get(path, params={name: LONG_ONE}), 409, "ValidationFailed")
        assert body["errors"] == [{"field": name, "code": "Invalid",
                                   "message": TOO_MANY_DIGITS}], (path, name)
    body = assert_error(client.post(f"/vms/{vm_uuid}", params={"action": "stop"},
                                    headers={"If-Match": LONG_ONE}), 409, "ValidationFailed")
    assert body["errors"][0]["message"] == TOO_MANY_DIGITS
    # a value beyond the range in as many digits is still refused with the range
    body = assert_error(client.get("/stats/stuck", params={"older_than": "9" * 26}),
                        409, "ValidationFailed")
    assert body["errors"][0]["message"] == "must be 0 to 1000000000"
