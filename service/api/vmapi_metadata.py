"""A VM's ``customer_metadata``, ``internal_metadata`` and ``tags`` as every body takes them
(CreateVm, UpdateVm, vm-agent's PutVm report): an object, or its JSON text, each value a
string, number or boolean, VMAPI's rules and texts (sdc-vmapi ``lib/common/validation.js``)
with vmledger's bounds on top.

- VMAPI parses a string value as JSON: createVm's ``createValidateMetadataFn``, UpdateVm's
  ``createMetadataObject`` and PutVm's ``translateVm`` each ``JSON.parse`` it. Text that is
  not JSON is ``Malformed JSON`` (UpdateVm's words; createVm's generic ``Invalid
  parameter`` says less, docs/vmapi-compatibility.md): whatever ``JSON.parse`` refuses,
  ``NaN`` and ``Infinity`` too, which Python's parser reads. A key the text gives twice is
  refused as the body's own object giving it twice is (``Invalid Parameters``, naming
  ``tags.KEY``: ``may be given only once``), and a value that is no object, given
  or parsed (``5``, ``"[1]"``, ``"null"``), ``Invalid data type`` (UpdateVm's words: VMAPI's
  createVm stored such a value, which no VM's metadata can be).
- Each value must be a string, number or boolean (``validMetadata``): ``null``, an object or
  an array is ``{field: "tags.KEY", message: "Forbidden Data Type"}``, as JavaScript's
  ``typeof null`` is ``object``. ``customer_metadata``'s key ending in ``_pw`` is
  ``Forbidden Metadata Key``; the first of either problem in key order is the one told.
- Then ours (``_bounded``): at most 128 keys of 1 to 128 characters, 64 KiB of JSON."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo
from pydantic_core import PydanticCustomError

from domain import json_input
from domain.errors import ValidationError
from service.api.vmapi_tags import metadata_problem, tags_problem

MAX_METADATA_KEYS = 128
MAX_METADATA_BYTES = 64 * 1024
MALFORMED_JSON = "Malformed JSON"
INVALID_DATA_TYPE = "Invalid data type"
Scalar = str | int | float | bool


def _as_metadata(*, passwords: bool) -> BeforeValidator:
    """The validator reading a metadata field's value as VMAPI does (the module's rules);
    ``passwords``: ``customer_metadata``'s, refusing a key ending in ``_pw``."""
    def read(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            field = info.field_name or "value"
            try:
                value = json_input.loads(value, constants=False)
            except json_input.RepeatedKeyError as error:
                # JSON.parse takes it (the last value wins), so not Malformed JSON: refused
                # as the same object given as an object is, by the body's parse, before any
                # field is read (ValidationError is no ValueError: pydantic lets it through
                # to errors.py, the route's own top-level text not put over it)
                raise ValidationError(f"{field}.{error.path}", "Invalid",
                                      "may be given only once") from None
            except json_input.JsonInputError:  # what JSON.parse refuses, NaN included
                raise PydanticCustomError("value_error", MALFORMED_JSON) from None
            # the text's value is held to what a body's own is (StrictModel._storable)
            problem = json_input.at_field(
                json_input.unstorable(value, field, levels_above=1), field)
            if problem:
                raise PydanticCustomError("value_error", "{problem}", {"problem": problem})
        if not isinstance(value, dict):
            raise PydanticCustomError("value_error", INVALID_DATA_TYPE)
        found = metadata_problem(value, passwords=passwords)
        if found is not None:  # named as VMAPI names it, FIELD.KEY (field_errors)
            key, message = found
            raise PydanticCustomError("metadata_key", message, {"key": key})
        return value
    return BeforeValidator(read, json_schema_input_type=dict[str, Scalar] | str)


def _bounded(value: dict[str, Any]) -> dict[str, Any]:
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"at most {MAX_METADATA_KEYS} keys")
    if any(not key or len(key) > 128 for key in value):
        raise ValueError("keys must be 1 to 128 characters")
    if len(json.dumps(value)) > MAX_METADATA_BYTES:
        raise ValueError(f"at most {MAX_METADATA_BYTES} bytes of JSON")
    return value


def _valid_tags(*, updating: bool) -> AfterValidator:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        problem = tags_problem(value, updating=updating)
        if problem is not None:
            raise ValueError(problem)
        return value
    return AfterValidator(check)


#: A VM's metadata or tags as any body gives them (PutVm's report says what a VM has).
Metadata = Annotated[dict[str, Scalar], _as_metadata(passwords=False), AfterValidator(_bounded)]
#: What CreateVm and UpdateVm take: VMAPI's rules on top (service/api/vmapi_tags.py).
CustomerMetadata = Annotated[dict[str, Scalar], _as_metadata(passwords=True),
                             AfterValidator(_bounded)]
Tags = Annotated[Metadata, _valid_tags(updating=False)]
#: An update's ``tags`` may not set Docker's own either, as VMAPI's update refuses them.
UpdatedTags = Annotated[Metadata, _valid_tags(updating=True)]
