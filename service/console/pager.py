"""The console's pagers: the text saying which rows a page shows, and its links to the
previous and next pages, by ``offset`` or (the fleet, as ``GET /vms``) by ``marker``.

The text never claims more than is known: a page by offset knows its rows' place, a page
after a marker does not (counting the rows before the marker would cost a scan), and a page
past the end shows no rows, so it says so, and links back to the last page that has some.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pager:
    """What a page's pager shows: ``range`` (e.g. "51–100 of 167"), and the addresses of the
    previous and next pages (``None``: no link), ``back`` naming the previous one."""

    range: str
    previous: str | None
    next: str | None
    back: str = "previous"


def by_offset(link: Callable[[int], str], *, shown: int, offset: int, size: int,
              total: int) -> Pager:
    """The pager of ``shown`` rows at ``offset`` of ``total``, ``size`` a page; ``link``
    makes a page's address from its offset (0: the first page)."""
    if shown:
        text = f"{offset + 1:,}–{offset + shown:,} of {total:,}"
        previous = link(max(offset - size, 0)) if offset else None
    else:
        text = f"none of {total:,}" + (f" at offset {offset:,}" if offset else "")
        # past the end: back to the last page that has rows, not to another empty one
        previous = link(max(total - 1, 0) // size * size) if offset else None
    return Pager(text, previous, link(offset + size) if offset + size < total else None)


def by_marker(link: Callable[[str | None], str], *, shown: int, total: int,
              next_marker: str | None) -> Pager:
    """The pager of ``shown`` rows after a marker, of ``total``: the next page is after the
    page's own next marker (``x-next-marker``; ``None`` on the last page), and the way back
    is the first page (a marker names no page before it). ``link`` makes a page's address
    from its marker (``None``: the first page)."""
    return Pager(f"{shown:,} after the marker, of {total:,}", link(None),
                 link(next_marker) if next_marker else None, back="first")
