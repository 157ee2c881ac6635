"""``Accept-Version``: the API versions served, and which one a client's semver range asks
for (api.md, "Contract: versions" and "Versions"). What each version does is
``service.commands.versioning``'s.
"""

from __future__ import annotations

import re
from functools import lru_cache

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0.0", "2.0.0")
# The version real VMAPI servers advertise; ``sdc-clients`` constructed with a version sends a
# range over it (``~9``). Such a range is served version 1, VMAPI's behaviour (api.md).
VMAPI_VERSION = "9.16.0"


class InvalidVersionError(Exception):
    """No supported version satisfies the ``Accept-Version`` range."""

    def __init__(self, requested: str):
        super().__init__(
            f"No supported version satisfies '{requested}'; supported: "
            + ", ".join(SUPPORTED_VERSIONS)
        )
        self.requested = requested
        self.supported = list(SUPPORTED_VERSIONS)


OLDEST_VERSION = SUPPORTED_VERSIONS[0]


def parse_version(version: str) -> tuple[int, int, int]:
    """``"2.0.0"`` as ``(2, 0, 0)``."""
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


_PART = r"(\d+|x|X|\*)"
# Build metadata, "+" and dot-separated identifiers of ASCII letters, digits and "-": read
# after a full version only (node-semver's XRANGEPLAIN, as VMAPI's restify 4 has it), and
# ignored, as semver ignores it in every comparison (``2.0.0+build`` is ``2.0.0``)
_BUILD = r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)"
# "~>" is node-semver's "~" (its LONETILDE, ``~>?``): Ruby's pessimistic operator
_RANGE = re.compile(
    rf"^\s*(~>|~|\^|>=|<=|>|<|=|v)?\s*v?{_PART}(?:\.{_PART}(?:\.{_PART}{_BUILD}?)?)?\s*$")
_ANY = ("*", "x", "X", "")


# More than any part of a version we serve or VMAPI's: what a part of more digits reads as.
_BEYOND_ANY_PART = 10**18


def _number(digits: str) -> int:
    """A range's part as a number; one of more than 18 digits (leading zeros aside) compares
    above every version we know, where ``int`` would refuse it past 4,300 digits."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= 18 else _BEYOND_ANY_PART


#: One comparator, read: its operator ("" for none) and its [major, minor, patch] (``_term``)
Term = tuple[str, list[str | None]]


def _term(term: str) -> Term | None:
    """One comparator as (operator, [major, minor, patch]), a part None where it is not
    given; an empty one and ``*`` as the wildcard major; None when it is not a comparator."""
    if term.strip() in _ANY:
        return "", ["*", None, None]
    match = _RANGE.match(term)
    if not match:
        return None
    operator, *parts = match.groups()
    return ("~" if operator == "~>" else operator), parts


def _satisfies(version: str, term: Term) -> bool:
    """Whether ``version`` satisfies one semver comparator, read by ``_term`` (``1``, ``~1``,
    ``1.0.0``, ``~2``, ``2.x``, ``^2.0``, ``*``)."""
    operator, parts = term
    have = parse_version(version)
    wanted = [None if p in (None, "x", "X", "*") else _number(p) for p in parts]
    major, minor, patch = wanted
    if major is None:
        return operator not in (">", "<")  # node-semver: ">*" and "<*" admit nothing
    if operator == "~":
        # ~1 = 1.x; ~1.2 = 1.2.x; ~1.2.3 = >=1.2.3 <1.3.0
        if have[0] != major or (minor is not None and have[1] != minor):
            return False
        return patch is None or have[2] >= patch
    if operator == "^":
        return have[0] == major and have >= (major, minor or 0, patch or 0)
    if operator in (">=", ">", "<=", "<"):
        return _compare(have, operator, major, minor, patch)
    # a plain version or x-range: every given part must match
    return all(w is None or w == h for w, h in zip(wanted, have, strict=True))


def _compare(have: tuple[int, int, int], operator: str, major: int, minor: int | None,
             patch: int | None) -> bool:
    """``>=1``, ``>1.2``, ``<2``, ``<=2.0``: a partial version compares as its range would
    (``>1`` is ``>=2.0.0``, ``<=2`` is ``<3.0.0``)."""
    given = [p for p in (major, minor, patch) if p is not None]
    prefix = tuple(have[: len(given)])
    wanted = tuple(given)
    return {">=": prefix >= wanted, ">": prefix > wanted,
            "<=": prefix <= wanted, "<": prefix < wanted}[operator]


# Clients send the same few headers on every request; parsing one costs more than its answer.
@lru_cache(maxsize=256)
def negotiate(accept_version: str | None) -> str:
    """The version served for ``accept_version`` (``||``-separated ranges allowed), api.md
    "Versioning": no header, ``*`` and every range node-semver reads as ``*`` (``x.x.x``,
    ``>=0``, ``1 ||``: ``_admits_any``) mean version 1 (what VMAPI's clients and tests were
    written against); otherwise the newest supported version the range admits; a range that
    admits none of ours but admits VMAPI's own version (``~9``, ``9.x``) is served version 1.
    Raises ``InvalidVersionError`` (not remembered: a bad header is parsed each time), also
    when any one alternative is not a range (``garbage || 2``, ``2 || 1 - 2``): node-semver
    throws on a range any of whose comparator sets it cannot read, and restify then serves no
    version. Answers are remembered for the last 256 distinct headers."""
    if accept_version is None:
        return OLDEST_VERSION
    alternatives = _alternatives(accept_version)
    if any(all(_admits_any(term) for term in terms) for terms in alternatives):
        return OLDEST_VERSION

    def admitted(version: str) -> bool:
        return any(all(_satisfies(version, term) for term in terms) for terms in alternatives)

    for version in sorted(SUPPORTED_VERSIONS, key=parse_version, reverse=True):
        if admitted(version):
            return version
    if admitted(VMAPI_VERSION):
        return OLDEST_VERSION
    raise InvalidVersionError(accept_version)


def _alternatives(accept_version: str) -> list[list[Term]]:
    """Every ``||`` alternative of ``accept_version`` as its comparators, read (``_term``)
    before any is tried, so that none is skipped unread. Raises ``InvalidVersionError`` when
    any comparator of any alternative is not one (node-semver's ``Range`` throws then)."""
    alternatives = []
    for alternative in accept_version.split("||"):
        terms = []
        for text in _comparators(alternative):
            term = _term(text)
            if term is None:
                raise InvalidVersionError(accept_version)
            terms.append(term)
        alternatives.append(terms)
    return alternatives


def _admits_any(term: Term) -> bool:
    """Whether one comparator is node-semver's "any version", which it rewrites to ``*``: an
    empty one, a wildcard major with any operator but ``>`` and ``<`` (``x.x.x``, ``~x``,
    ``>=*``, ``x.1.2``: parts after a wildcard are ignored), and ``>=0`` (``>=0.0.0``,
    ``>=0.x``; its ``replaceGTE0``). An alternative all of whose comparators are "any" makes
    the whole range ``*``, which is version 1 (api.md "Contract: versions"); a wildcard
    AND-ed with another comparator is that comparator (``2 x`` is ``2``)."""
    operator, parts = term
    if parts[0] in _ANY:
        return operator not in (">", "<")
    if operator != ">=":
        return False
    numbers = [p for p in parts if p is not None and p not in _ANY]
    return all(_number(p) == 0 for p in numbers)


def _comparators(alternative: str) -> list[str]:
    """One ``||`` alternative as its comparators, each of which must hold: node-semver's
    set, joined by spaces (``>=1 <2``; ``>= 1`` is one comparator)."""
    joined = re.sub(r"(~|\^|>=|<=|>|<|=)\s+", r"\1", alternative.strip())
    return joined.split() or [""]
