"""The fleet's chart in Chromium: every label of its SVG lies inside the view box whatever the
counts, up to 9,999,999 VMs in a state. (Found by a tester of the console: with 28,770 VMs a
fixed view box cut the y-axis's "28,118" to "8,118" and ran "provisioning 3,468" past its
right edge.)"""

from __future__ import annotations

from typing import Any

import pytest

from projections.analytics_queries import STATE_ORDER
from projections.console_queries import StatesOverTime
from service.console.pages import STATIC
from service.console.render import chart, render

# each text's box, and the view box, in the SVG's own units
_BOXES = """() => {
    const svg = document.querySelector("svg.chart");
    const view = svg.viewBox.baseVal;
    return {
        view: {left: view.x, top: view.y, right: view.x + view.width,
               bottom: view.y + view.height},
        texts: [...svg.querySelectorAll("text")].map((text) => {
            const box = text.getBBox();
            return {text: text.textContent, left: box.x, top: box.y,
                    right: box.x + box.width, bottom: box.y + box.height};
        }),
    };
}"""


def _drawn(browser: Any, most: int) -> dict[str, Any]:
    """The chart of a fleet whose every state holds up to ``most`` VMs, as Chromium lays it
    out with the console's stylesheet: its view box and its texts' boxes."""
    counts = {state: most - i for i, state in enumerate(STATE_ORDER)}
    over_time = StatesOverTime("minute", [
        ("2026-11-30T01:30", dict.fromkeys(STATE_ORDER, 0)), ("2026-11-30T01:59", counts)])
    css = (STATIC / "console.css").read_text()
    document = (f"<!doctype html><html><head><style>{css}</style></head><body><main>"
                f"{render('chart.html', chart=chart(over_time), owner=False)}</main></body></html>")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        tab = context.new_page()
        tab.set_content(document)
        return tab.evaluate(_BOXES)
    finally:
        context.close()


@pytest.mark.parametrize("most", [7, 28_770, 9_999_999])
def test_every_label_of_the_chart_lies_inside_its_view(browser: Any, most: int) -> None:
    drawn = _drawn(browser, most)
    view, texts = drawn["view"], drawn["texts"]
    assert f"{most:,}" in {t["text"] for t in texts}  # the y-axis's maximum
    assert f"provisioning {most:,}" in {t["text"] for t in texts}  # the longest legend
    for text in texts:
        assert view["left"] <= text["left"] and text["right"] <= view["right"], (text, view)
        assert view["top"] <= text["top"] and text["bottom"] <= view["bottom"], (text, view)
