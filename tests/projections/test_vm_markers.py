"""``decode_marker`` itself refuses an opaque marker we could not have handed out, so every
caller is protected, not only the ListVms parameters that used to check the values beside it
(api.md, "Reads")."""

from __future__ import annotations

import pytest

from projections.vm_markers import (
    InvalidMarkerError,
    decode_marker,
    decode_our_marker,
    encode_marker,
)
from projections.vm_queries import SORT_FIELDS
from tests.api.test_marker_values import FORGED, VM, opaque

UNSTORABLE = {
    "alias NUL": ("alias.asc", opaque(f'["alias.asc", "p\\u0000", "{VM}"]')),
    "alias surrogate": ("alias.asc", opaque(f'["alias.asc", "\\ud800", "{VM}"]')),
    "uuid NUL": ("ram.asc", opaque(f'["ram.asc", 128, "{VM}\\u0000"]')),
    "uuid surrogate": ("ram.asc", opaque('["ram.asc", 128, "\\ud800"]')),
}


@pytest.mark.parametrize(("field", "value", "uuid"), FORGED.values(), ids=FORGED.keys())
def test_a_value_no_column_holds_is_refused(field, value, uuid) -> None:
    with pytest.raises(InvalidMarkerError):
        decode_marker(encode_marker(f"{field}.asc", value, uuid), f"{field}.asc")


@pytest.mark.parametrize(("sort", "marker"), UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_text_no_column_can_store_is_refused(sort, marker) -> None:
    with pytest.raises(InvalidMarkerError):
        decode_marker(marker, sort)


WRONG_TYPE = {
    "ram as text": ("ram", "128"), "ram as a boolean": ("ram", True),
    # 128.0 is 128, as JSON.parse reads it (domain/json_input.py, js_number): a fraction is not
    "ram as a fraction": ("ram", 128.5), "docker as false": ("docker", False),
    "alias as a number": ("alias", 5), "state as null": ("state", None),
    "tags as a list": ("tags", ["a"]),
}


@pytest.mark.parametrize(("field", "value"), WRONG_TYPE.values(), ids=WRONG_TYPE.keys())
def test_a_value_of_another_type_than_its_columns_is_refused(field, value) -> None:
    with pytest.raises(InvalidMarkerError):
        decode_marker(encode_marker(f"{field}.asc", value, VM), f"{field}.asc")


def test_a_marker_for_another_sort_or_with_no_uuid_is_refused() -> None:
    with pytest.raises(InvalidMarkerError):
        decode_marker(encode_marker("ram.asc", 128, VM), "ram.desc")
    with pytest.raises(InvalidMarkerError):
        decode_marker(encode_marker("ram.asc", 128, 5), "ram.asc")


COLUMN_VALUE = {"uuid": VM, "owner_uuid": VM, "image_uuid": "", "billing_id": "",
                "server_uuid": VM, "tags": "-a=b-", "brand": "bhyve", "state": "running",
                "alias": "", "max_physical_memory": 0, "ram": 128,
                "create_timestamp": "2026-01-01T12:00:00.123Z", "docker": 0}


@pytest.mark.parametrize("field", sorted(SORT_FIELDS))
def test_a_value_its_column_holds_is_the_position_named(field) -> None:
    value = COLUMN_VALUE[field]
    assert decode_marker(encode_marker(f"{field}.desc", value, VM), f"{field}.desc") == (
        value, VM)


def test_a_marker_of_another_form_is_not_ours_and_one_of_ours_is_checked_as_decode_marker_does(
) -> None:
    # VMAPI's markers are JSON, not our base64: the ListVms parameters read those themselves
    assert decode_our_marker(f'{{"uuid": "{VM}"}}', "uuid.asc") is None
    assert decode_our_marker("not base64!", "uuid.asc") is None
    assert decode_our_marker(encode_marker("ram.asc", 128, VM), "ram.asc") == (128, VM)
    with pytest.raises(InvalidMarkerError):
        decode_our_marker(encode_marker("ram.asc", 128, VM), "ram.desc")
