"""JSON a client sent (a marker, a header, a registration), parsed so that any text is either
a value or a ``JsonInputError`` naming why not: never another exception.

``json.loads`` raises ``RecursionError`` (not a ``ValueError``) past its recursion limit, about
1,000 levels of arrays or objects, so a caller catching ``ValueError`` let a deeply nested
value through as a 500. Every parse of client JSON goes through ``loads`` here.

Numbers are read as JavaScript's ``JSON.parse`` reads them, as VMAPI does (``js_number``):
``1.0`` is the integer ``1``.

``unstorable`` says why a parsed value is text or a number that no table could store or no
answer could carry: checked before anything is appended or kept, by every request body
(``service.api.schemas.StrictModel``), a URL (``service.api.url_checks``), a changefeed
registration (``service.changes.triton``) and a ListVms marker (``projections.vm_markers``).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any


class JsonInputError(ValueError):
    """Client text that is not JSON; its message says why in a few words (the parser's own
    message for a syntax error). ``too_deep``: it may be valid JSON, nested past what the
    parser takes (text kept as it is would never be read back as a value)."""

    def __init__(self, reason: str, *, too_deep: bool = False):
        super().__init__(reason)
        self.too_deep = too_deep


class RepeatedKeyError(JsonInputError):
    """A JSON object that gives one key twice; ``path`` names it (``ram``, ``tags.a``,
    ``networks.0.ip``): which value to take would be a guess, as for a query parameter given
    twice (api.md, "Versions")."""

    def __init__(self, path: str):
        super().__init__(f"{path}: may be given only once")
        self.path = path


class _Repeated(Exception):
    """Raised by ``_checked_pairs``: some object gives a key twice (``_repeated_path`` finds
    which, on this rare path only)."""


def _checked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _Repeated
    return value


class _Marked(dict):  # type: ignore[type-arg]
    """An object that gave ``repeated`` twice, as ``_marked_pairs`` parses it."""

    repeated = ""


def _marked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    marked = _Marked(value)
    seen: set[str] = set()
    marked.repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
    return marked


#: JavaScript's ``Number.MAX_SAFE_INTEGER``: every integer up to it is one double's alone.
MAX_SAFE_INTEGER = 2**53 - 1


def js_number(text: str) -> int | float:
    """The number JSON's ``text`` (one with a fraction or an exponent) is to JavaScript,
    whose ``JSON.parse`` VMAPI reads every body with: a whole value within
    ``MAX_SAFE_INTEGER`` as an ``int`` (``1.0`` and ``1E5`` are ``1`` and ``100000`` there,
    and ``-0.0`` prints as ``0``), so it is stored, shown and matched (``tag.a=1``) as VMAPI
    would; any other as a ``float`` (``inf`` past the largest double, which ``unstorable``
    refuses)."""
    value = float(text)
    if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return int(value)
    return value


# One decoder, built once: ``json.loads`` with a hook builds a decoder per call, which cost
# more than the hook (a small CreateVm body: 2.4 µs as json.loads(bytes) did it, 3.8 µs with
# json.loads(text, object_pairs_hook=...), 2.2 µs with this decoder).
_BODY_DECODER = json.JSONDecoder(object_pairs_hook=_checked_pairs, parse_float=js_number)


class _Constant(Exception):
    """Raised by ``_JS_DECODER`` at ``NaN``, ``Infinity`` or ``-Infinity``."""


def _no_constant(name: str) -> Any:
    raise _Constant(name)


# ``NaN``, ``Infinity`` and ``-Infinity`` are Python's parser's extensions: no JSON (RFC 8259),
# and a syntax error to JavaScript's ``JSON.parse``, as VMAPI parses a metadata text
_JS_DECODER = json.JSONDecoder(object_pairs_hook=_checked_pairs, parse_constant=_no_constant,
                               parse_float=js_number)
_UTF8_BOM = b"\xef\xbb\xbf"


def loads_body(raw: bytes) -> Any:
    """The value of a request body's JSON, ``raw``: UTF-8 text (a leading byte order mark
    aside, which RFC 8259 lets a parser ignore), as api.md says a body is; ``json.loads`` of
    bytes also read UTF-16 and UTF-32, and a body in either was applied. Raises
    ``JsonInputError`` as ``loads`` does, and ``RepeatedKeyError`` for an object that gives
    a key twice (``json.loads`` kept the last silently: ``{"ram": 1, "ram": 2}``)."""
    text = _utf8(raw.removeprefix(_UTF8_BOM))
    try:
        return _decoded(text)
    except json.JSONDecodeError as error:  # worded as FastAPI's parse of a body worded it
        if "\x00" in text:  # UTF-16 or UTF-32 of ASCII is UTF-8 too, NUL bytes between
            raise JsonInputError(unparsable_reason(UnicodeError())) from None
        raise JsonInputError(f"{error.msg}, at character {error.pos}") from None


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JsonInputError(unparsable_reason(error)) from None


def _decoded(text: str, decoder: json.JSONDecoder = _BODY_DECODER) -> Any:
    """``decoder``'s value of ``text``; a syntax error is the caller's to word
    (``json.JSONDecodeError``). Raises ``RepeatedKeyError``, and ``JsonInputError`` for a
    value nested too deep, an integer of more digits than ``int()`` reads, or (``_JS_DECODER``)
    a ``NaN`` or ``Infinity``."""
    try:
        return decoder.decode(text)
    except _Constant as constant:
        raise JsonInputError(f"{constant} is not JSON") from None
    except _Repeated:
        raise RepeatedKeyError(_repeated_path(text)) from None
    except RecursionError:
        raise JsonInputError(unparsable_reason(RecursionError()), too_deep=True) from None
    except json.JSONDecodeError:
        raise
    except ValueError:
        # int()'s limit on the digits it reads (sys.get_int_max_str_digits), the one other
        # ValueError the decoder raises: it was a 500 on every body route (a tester)
        raise JsonInputError(TOO_MANY_DIGITS) from None


#: Why an integer past ``int()``'s digits is refused: far past any double as well, it is
#: refused where its value could be named only as the whole text's problem.
TOO_MANY_DIGITS = (f"an integer of more than {sys.get_int_max_str_digits()} digits: "
                   "numbers must be finite")


def _repeated_path(text: str) -> str:
    """The dotted path of the first key given twice in ``text`` (JSON holding one), its
    objects walked outermost first, without recursion."""
    pending: list[tuple[Any, str]] = [(json.loads(text, object_pairs_hook=_marked_pairs), "")]
    while pending:
        value, path = pending.pop()
        if isinstance(value, _Marked):
            return _joined(path, value.repeated)
        items = (value.items() if isinstance(value, dict)
                 else enumerate(value) if isinstance(value, list) else ())
        pending.extend(reversed([(item, _joined(path, str(key))) for key, item in items]))
    return "body"


def _joined(path: str, key: str) -> str:
    shown = printable(key)
    return f"{path}.{shown}" if path else shown


def loads(text: str | bytes, *, constants: bool = True) -> Any:
    """The value of the JSON ``text`` (bytes read as UTF-8). Raises ``JsonInputError`` for
    text that is not JSON, is not UTF-8, or is nested too deeply to parse, and
    ``RepeatedKeyError`` for an object that gives a key twice, as a body's
    (``loads_body``). ``constants=False``: ``NaN``, ``Infinity`` and ``-Infinity``, which
    Python's parser reads, are a ``JsonInputError`` too, as JavaScript's ``JSON.parse``
    refuses them (a text VMAPI parses with it: a metadata field's)."""
    if isinstance(text, bytes):
        text = _utf8(text)
    try:
        return _decoded(text, _BODY_DECODER if constants else _JS_DECODER)
    except JsonInputError:
        raise
    except ValueError as error:  # a syntax error
        raise JsonInputError(str(error)) from None


def unparsable_reason(cause: BaseException | None) -> str:
    """Why JSON that is not a syntax error could not be parsed, in a few words."""
    if isinstance(cause, RecursionError):
        return "nested too deeply"  # past the parser's recursion limit, about 1,000 levels
    if isinstance(cause, UnicodeError):
        return "not UTF-8 text"
    return "it could not be parsed"


def unstorable(value: Any, path: str = "", *, levels_above: int = 0) -> str | None:
    """Why ``value`` (a parsed JSON value) cannot be stored and served, naming where in it,
    or None. A NUL character or a lone surrogate in a string or key (PostgreSQL's text refuses
    the first, UTF-8 the second: a stored event holding one stopped every read model on it)
    and a non-finite number (``NaN``, ``Infinity``: no JSON response can carry it; an integer
    past the largest double, which a double reads as ``Infinity``) are refused
    before anything is appended; so is a value nested more than ``MAX_DEPTH`` levels of
    objects and arrays deep (``levels_above``: the levels of the value ``value`` sits in, a
    body's own object for one of its fields), naming ``path``: the parser takes about 1,000,
    and every later reader of a value nested that deep (a fold's copy, a renderer) recursed
    past Python's limit. Walks the value without recursion."""
    pending: list[tuple[Any, str, int]] = [(value, path, levels_above)]
    while pending:
        item, where, levels = pending.pop()
        if isinstance(item, (dict, list)):
            if levels >= MAX_DEPTH:
                return f"{path or 'value'}: nested more than {MAX_DEPTH} levels deep"
            inner = _inner(item, where, levels + 1)
            # reversed, so that the first problem in the value's own order is the one named
            pending.extend(reversed(inner))
            continue
        found = _unstorable_scalar(item, where)
        if found:
            return found
    return None


# How deep a value a client sends may nest objects and arrays (a body's own object is the
# first level): a VM's context, metadata and reports need a few; docs/api.md, "Errors".
MAX_DEPTH = 32


def _inner(value: dict[str, Any] | list[Any], path: str, levels: int
           ) -> list[tuple[Any, str, int]]:
    """The keys and items of a container, each with its path and level, keys first."""
    if isinstance(value, list):
        return [(item, f"{path}[{index}]", levels) for index, item in enumerate(value)]
    inner = []
    for key, item in value.items():
        shown = printable(str(key))
        where = f"{path}.{shown}" if path else shown
        inner.append((str(key), f"{where} (the key)", levels))
        inner.append((item, where, levels))
    return inner


def at_field(problem: str | None, field: str) -> str | None:
    """``problem`` (``unstorable`` of a value at path ``field``) as an error item whose
    ``field`` is ``field`` words it: a problem of the value itself without the field's name,
    which the item names already (``{"field": "after", "message": "after: strings may not
    contain …"}`` named it twice: console tester), a deeper one with its path (``tags.a: …``),
    a key's with "(the key)"."""
    if problem is None:
        return None
    return problem.removeprefix(f"{field}: ")


def _unstorable_scalar(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path or 'value'}: strings may not contain the NUL character"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path or 'value'}: strings must be valid Unicode (a lone surrogate)"
    elif _not_finite(value):
        return f"{path or 'value'}: numbers must be finite"
    return None


#: The bits of the largest integer below which every one is a finite double.
_DOUBLE_BITS = 1023


def _not_finite(value: Any) -> bool:
    """Whether ``value`` is a float ``NaN`` or infinite, or an integer that rounds to no
    finite double: VMAPI's JSON.parse reads it as ``Infinity`` (so would any client reading
    a double), refused as ``Infinity`` is."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if not isinstance(value, int) or value.bit_length() <= _DOUBLE_BITS:
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


#: The most characters of one value a client sent that a message repeats: a 40 KB
#: ``Accept-Version`` or a 5,000-character path id was echoed whole (a tester).
ECHOED = 100
#: The mark where an echoed value was cut.
CUT_MARK = "…"


def cut(value: object, limit: int = ECHOED) -> str:
    """``value`` (as ``str`` gives it) as a message may repeat it: at most ``limit``
    characters, and the mark ``CUT_MARK`` after those when it was longer."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + CUT_MARK


def printable(text: str) -> str:
    """``text`` safe to put in an error message: NUL and lone surrogates escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
