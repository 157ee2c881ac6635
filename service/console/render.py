"""Rendering the console's HTML: the Jinja2 templates (autoescaped), and what the templates
draw from data: the over-time chart's SVG geometry, an event's kind (its colour on the
timeline), and the differences between two VM objects."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from domain.transitions import STATE_EVENTS
from domain.vm import FIRST_EVENT_TYPES
from projections.analytics_queries import STATE_ORDER
from projections.console_queries import StatesOverTime, bucket_start

TEMPLATES = Path(__file__).parent / "templates"


def _as_text(value: Any) -> Any:
    """What ``{{ value }}`` shows: an object or a list as JSON, as the API answers it (a
    failed VM's ``error`` read ``{'reason': ...}``, Python's repr); anything else as is."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                   finalize=_as_text)
# JSON as the API answers it: characters as they are (not \u escapes), left to the
# autoescape to make safe. Jinja's own tojson escapes < > & ' for a script, where a page
# showed "\u003cb\u003e" for a tag the API returns as "<b>" (found by a console tester).
_ENV.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True,
                                                  ensure_ascii=False)
_ENV.filters["json"] = lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False)
_ENV.filters["count"] = lambda value: f"{value:,}"
_ENV.globals["STATES"] = STATE_ORDER

_FAILURES = {"Failed", "ProvisionFailed"}
_QUARANTINE = {"Quarantined", "Released"}


def render(template: str, **context: Any) -> str:
    """The template rendered with ``context``."""
    return _ENV.get_template(template).render(**context)


def fragment(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A fragment response (``text/html``), never cached."""
    return HTMLResponse(render(template, **context), status_code=status_code,
                        headers={"cache-control": "no-store"})


def event_kind(event_type: str) -> str:
    """The timeline's class for an event type: ``failure``, ``state`` (a state change, or
    the VM's first, ``Created`` or ``Discovered``: it enters its first state),
    ``quarantine``, ``job`` or ``other`` (metadata, capacity, volumes)."""
    if event_type in _FAILURES:
        return "failure"
    if event_type in _QUARANTINE:
        return "quarantine"
    if event_type in STATE_EVENTS or event_type in FIRST_EVENT_TYPES:
        return "state"
    if event_type.startswith("Job"):
        return "job"
    return "other"


_ENV.globals["event_kind"] = event_kind


# A key written bare in a path: letters, digits, "_" and "-" (``customer_metadata.user-script``);
# any other (a ".", a bracket, a quote, a space, or none) is written as a JSON string in
# brackets, so a tag named "a.b" is ``tags["a.b"]``, never the nested path ``tags.a.b``.
_BARE_KEY = re.compile(r"[\w-]+")


def key_path(path: str, key: Any) -> str:
    """The path of ``key`` inside the object at ``path`` ("" for the top): ``path.key``, or
    ``path["key"]`` (JSON string quoting) for a key a dot would make ambiguous. Each path
    names one key: two keys of one object never share a path."""
    text = str(key)
    if _BARE_KEY.fullmatch(text):
        return f"{path}.{text}" if path else text
    return f"{path}[{json.dumps(text, ensure_ascii=False)}]"


def _walk(before: Any, after: Any, path: str, found: list[dict[str, Any]]) -> None:
    # Objects are compared key by key only while both sides are objects: a key on one side
    # alone is one change of its whole value (flattening each side on its own made an empty
    # object a leaf and a non-empty one nothing, so a first tag read "tags: {} -> null").
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            inner = key_path(path, key)
            if key not in before:
                found.append({"field": inner, "before": None, "after": after[key],
                              "absent": "before"})
            elif key not in after:
                found.append({"field": inner, "before": before[key], "after": None,
                              "absent": "after"})
            else:
                _walk(before[key], after[key], inner, found)
    elif before != after:
        found.append({"field": path, "before": before, "after": after, "absent": None})


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields that differ between two VM objects, by path (``tags.role``; a key holding
    a dot or another separator in brackets, ``tags["a.b"]``: ``key_path``), in key order:
    ``[{field, before, after, absent}]``. Objects on both sides are compared
    field by field; anything else (a list, an object against null) is one change of the
    whole value. ``absent`` is ``"before"`` or ``"after"`` for a field only the other
    version has (its value there is None), else None (a field that is null is there)."""
    found: list[dict[str, Any]] = []
    _walk(before, after, "", found)
    return found


@dataclass(frozen=True)
class Chart:
    """An SVG step chart of VMs by state over time: one polyline per state (plot area
    ``WIDTH`` × ``HEIGHT`` from the origin), the y-axis maximum and the first and last
    buckets' times (the x-axis's ends' labels). ``left`` is the room left of the y-axis for
    its labels and ``right`` the x where the view ends, past the legend: both grow with the
    labels' lengths, so a count of any size is shown whole (a fixed view box cut "28,118" to
    "8,118" and ran "provisioning 3,468" past its edge)."""

    series: list[dict[str, Any]]
    maximum: int
    first: str | None
    last: str | None
    unit: str
    buckets: int
    left: int = 40
    right: int = 700

    WIDTH = 600
    HEIGHT = 200
    # an upper bound of one character's width at the labels' 11 px (console.css): DejaVu
    # Sans, Chromium's default on Debian, draws a digit 7 px wide and no lowercase letter of
    # a state's name wider
    CHAR_WIDTH = 7.5
    TICK_GAP = 4  # between the y-axis and its labels' ends
    LEGEND_GAP = 8  # between the plot and the legend
    MARGIN = 6  # past the longest label


def _room(texts: list[str]) -> int:
    """Width (view box units) that holds the longest of ``texts`` at the labels' font."""
    return math.ceil(max(map(len, texts), default=0) * Chart.CHAR_WIDTH) + Chart.MARGIN


def _label(bucket: str) -> str:
    """A bucket's start as the axis names it: RFC 3339 to the second (``2026-11-30T01:30:00Z``
    for the ten minutes ``2026-11-30T01:3``); a day, month or year as its own date text."""
    if len(bucket) <= 10:
        return bucket
    return bucket_start(bucket).strftime("%Y-%m-%dT%H:%M:%SZ")


def chart(over_time: StatesOverTime) -> Chart:
    """The chart's geometry. x is time: a point stands at its bucket's start, between the
    first bucket's (0) and the last's (``WIDTH``), so a quiet hour is as wide as an hour,
    however few buckets had a change in it (the points had been spaced evenly). Each count
    holds until the next bucket's (a step: a count of VMs does not slide between changes);
    one bucket alone is drawn across the chart. y is the count, 0 at the bottom. At most
    two coordinates a bucket, and ``states_over_time`` gives at most ``MAX_BUCKETS`` buckets
    (a life of more than 120 years: one a year)."""
    points = over_time.points
    maximum = max((n for _, counts in points for n in counts.values()), default=0) or 1
    times = [bucket_start(bucket).timestamp() for bucket, _ in points]
    span = times[-1] - times[0] if points else 0
    xs = [f"{(t - times[0]) * Chart.WIDTH / span:.1f}" if span else "0.0" for t in times]
    series = []
    for state in STATE_ORDER:
        if not any(counts[state] for _, counts in points):
            continue
        ys = [f"{Chart.HEIGHT - counts[state] * Chart.HEIGHT / maximum:.1f}"
              for _, counts in points]
        steps = [f"{xs[0]},{ys[0]}"]
        for i in range(1, len(points)):
            steps += [f"{xs[i]},{ys[i - 1]}", f"{xs[i]},{ys[i]}"]
        if len(points) == 1:
            steps.append(f"{Chart.WIDTH:.1f},{ys[0]}")
        series.append({"state": state, "points": " ".join(steps), "last": points[-1][1][state]})
    left = max(40, Chart.TICK_GAP + _room([f"{maximum:,}"]))
    legends = [f"{line['state']} {line['last']:,}" for line in series]
    right = max(Chart.WIDTH + 100, Chart.WIDTH + Chart.LEGEND_GAP + _room(legends))
    return Chart(series, maximum, _label(points[0][0]) if points else None,
                 _label(points[-1][0]) if points else None, over_time.unit, len(points),
                 left, right)
