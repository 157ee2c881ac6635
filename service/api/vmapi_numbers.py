"""Numbers as VMAPI validates them (sdc-vmapi ``lib/common/validation.js``,
``createValidateNumberFn`` and ``validNumber``): a JSON number or its decimal text
(``"ram": "1024"``), refused as "Not a valid number: number must be >= MIN" (and "<= MAX"
where VMAPI has a maximum). ListVms' ``limit`` and ``offset`` (service/api/list_vms_params.py)
and CreateVm's ``ram`` and ``cpu_cap`` (service/api/schemas.py) are read so.

VMAPI reads the value with ``parseInt``, so it also took ``"12abc"``, ``1.5``, ``" 12"`` or
``[5]`` (then stored ``Number()`` of it: ``NaN``, ``1.5``); vmledger takes only a whole number,
and refuses any other value with the same text (docs/vmapi-compatibility.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from service.api.params import integer_param


def vmapi_number_refusal(minimum: int, *, vmapi_maximum: int | None,
                         maximum: int) -> Callable[[int | None], str]:
    """VMAPI's refusal of a number that is not from ``minimum`` to ``vmapi_maximum`` (None:
    VMAPI has no maximum), given the number read (None: not a number): vmledger's own
    ``maximum`` is named only to a number above it, as ``validNumber`` words a maximum."""
    def message(number: int | None) -> str:
        top = vmapi_maximum if vmapi_maximum is not None else (
            maximum if number is not None and number > maximum else None)
        bounds = f">= {minimum}" + (f" and <= {top}" if top is not None else "")
        return f"Not a valid number: number must be {bounds}"
    return message


def body_integer(minimum: int, maximum: int, message: Callable[[int | None], str]
                 ) -> BeforeValidator:
    """A body field's validator taking an integer from ``minimum`` to ``maximum`` as a JSON
    number (``128.0`` too: JSON does not tell it from ``128``) or its decimal text, as the
    same parameter in a query is read (``integer_param``); anything else is refused with
    ``message(number read)`` as the field's error (a ``PydanticCustomError``, so every other
    field's error is reported with it)."""
    def check(value: Any) -> int:
        text = _decimal_text(value)
        refusals: list[str] = []
        number = None if text is None else integer_param(
            {"value": text}, "value", minimum=minimum, maximum=maximum,
            refuse=lambda _name, refusal: refusals.append(refusal), message=message)
        if number is None:
            raise PydanticCustomError("vmapi_number", "{refusal}",
                                      {"refusal": refusals[0] if refusals else message(None)})
        return number
    return BeforeValidator(check)


def _decimal_text(value: Any) -> str | None:
    """The decimal text of a JSON number or string ``value`` that may hold an integer; None
    for any other (``true`` is no number, as ``parseInt("true")`` is ``NaN``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)  # an integer a double holds (json_input.unstorable): few digits
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else None
    return value if isinstance(value, str) else None
