"""The value types of body fields that VMAPI rules, each by VMAPI's rule and in its words
(service/api/vmapi_rules.py), as the same value in the query is: a uuid."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from service.api.vmapi_rules import INVALID_UUID, is_uuid


def _vmapi_uuid(value: Any) -> Any:
    if not is_uuid(value):
        raise ValueError(INVALID_UUID)  # VMAPI's words, as a query parameter's
    return value


#: A UUID a body gives, by VMAPI's rule (lowercase, hyphenated: service/api/vmapi_rules.py)
#: and in its words, "Invalid UUID": every body's uuid field and key is one. pydantic's
#: ``UUID`` took upper case, no hyphens, braces and ``urn:uuid:``, which VMAPI refuses, and
#: answered "Input should be a valid UUID, invalid length: found 3".
Uuid = Annotated[str, BeforeValidator(_vmapi_uuid), Field(json_schema_extra={"format": "uuid"})]
