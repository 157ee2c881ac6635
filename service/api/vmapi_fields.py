"""The value types of body fields that VMAPI rules, each by VMAPI's rule and in its words
(service/api/vmapi_rules.py), as the same value in the query is: a uuid, a VM's alias, and a
volume's or network's name, which takes an alias's characters; and ``refused_as``, a
field's refusal of its text's shape in words saying what it must be."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from service.api.vmapi_rules import (
    ALIAS_MAX_LENGTH, ALIAS_MISMATCH, ALIAS_RE, INVALID_UUID, is_alias, is_uuid,
)


def _vmapi_uuid(value: Any) -> Any:
    if not is_uuid(value):
        raise ValueError(INVALID_UUID)  # VMAPI's words, as a query parameter's
    return value


#: A UUID a body gives, by VMAPI's rule (lowercase, hyphenated: service/api/vmapi_rules.py)
#: and in its words, "Invalid UUID": every body's uuid field and key is one. pydantic's
#: ``UUID`` took upper case, no hyphens, braces and ``urn:uuid:``, which VMAPI refuses, and
#: answered "Input should be a valid UUID, invalid length: found 3".
Uuid = Annotated[str, BeforeValidator(_vmapi_uuid), Field(json_schema_extra={"format": "uuid"})]


def _vmapi_string(max_length: int) -> Any:
    """VMAPI's string check (``createValidateStringFn`` with ALIAS_RE), in its words."""
    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError("Not a valid string")
        if len(value) > max_length:
            raise ValueError(f"String is longer than maximum of {max_length} characters")
        if not is_alias(value):
            raise ValueError(ALIAS_MISMATCH)
        return value
    return BeforeValidator(check)


_ALIAS_SCHEMA = {"pattern": f"^{ALIAS_RE.pattern}$", "minLength": 1}
#: A VM's alias: VMAPI's regexp and its create validator's 189 characters (zonecfg keeps it
#: base64-encoded in 255 bytes), refused in VMAPI's words, as ListVms' ``alias`` is.
Alias = Annotated[str, _vmapi_string(ALIAS_MAX_LENGTH),
                  Field(json_schema_extra={**_ALIAS_SCHEMA, "maxLength": ALIAS_MAX_LENGTH})]
#: A volume's or network's name: an alias's characters, at most 64 of them (no zonecfg
#: bound applies; 64 is what names were before VM aliases took VMAPI's 189).
Name = Annotated[str, _vmapi_string(64), Field(json_schema_extra={**_ALIAS_SCHEMA,
                                                                  "maxLength": 64})]


# pydantic's refusals of a string by its length or pattern alone
_TEXT_SHAPE = frozenset({"string_too_short", "string_too_long", "string_pattern_mismatch"})


def refused_as(message: str) -> Any:
    """A validator to annotate a string field with after its ``Field`` bounds: their refusal
    (pydantic's "String should have at least 9 characters", "… should match pattern …") is
    said as ``message``, what the value must be ("must be an IPv4 CIDR"); a value of another
    type keeps pydantic's "Input should be a valid string" (a tester's "garbage" subnet)."""
    def validate(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as error:
            if all(item["type"] in _TEXT_SHAPE for item in error.errors()):
                raise PydanticCustomError("value_error", message) from None
            raise
    return WrapValidator(validate)
