"""The console's pagers (docs/console.md): the fleet pages by ``marker`` as ``GET /vms`` does,
its next link the page's ``x-next-marker``; a range never claims rows a page does not show;
a page past the end says so and links back to the last page that has rows. And the pages'
shells: each names its icon and a title of its own."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient

from tests.api.helpers import create_vm


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr data-vm="([^"]+)"', page)


def _range(page: str, testid: str = "vm-range") -> str:
    return html.unescape(re.search(rf'data-testid="{testid}">([^<]*)<', page).group(1))


def _link(page: str, rel: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)"[^>]* rel="{rel}"', page)
    return html.unescape(found.group(1)) if found else None


def _fragment(link: str) -> str:
    """The fragment behind a fleet page's link."""
    return link.replace("/console", "/console/fragments/fleet", 1)


def test_the_fleet_pages_by_marker_with_the_next_pages_marker(client: TestClient) -> None:
    # found by a tester: the page after a marker said "1–2 of 5" while showing VMs 3-4, and
    # its next link added offset to the marker, which GET /vms refuses (409)
    for _ in range(5):
        create_vm(client)
    first = client.get("/vms", params={"limit": 2})
    marker = first.headers["x-next-marker"]
    second = client.get("/vms", params={"limit": 2, "marker": marker})
    page = client.get("/console/fragments/fleet", params={"limit": 2, "marker": marker}).text
    assert _rows(page) == [vm["uuid"] for vm in second.json()]
    assert _range(page) == "2 after the marker, of 5"  # where they are is not known
    next_link = _link(page, "next")
    assert "offset" not in next_link
    assert f"marker={second.headers['x-next-marker']}" in next_link.replace("%3D", "=")
    third = client.get(_fragment(next_link))
    assert third.status_code == 200
    assert _rows(third.text) == [vm["uuid"] for vm in client.get(
        "/vms", params={"limit": 2, "marker": second.headers["x-next-marker"]}).json()]
    assert _link(third.text, "next") is None  # the last page: GET /vms gave no marker
    assert _link(page, "prev") == "/console?limit=2"  # back to the start, not a guess


def test_a_fleet_page_past_the_end_says_so_and_links_to_the_last_page(
        client: TestClient) -> None:
    # found by a tester: "0–100000 of 5", its previous link another empty page
    for _ in range(5):
        create_vm(client)
    page = client.get("/console/fragments/fleet", params={"limit": 2, "offset": 100}).text
    assert _rows(page) == []
    assert _range(page) == "none of 5 at offset 100"
    assert _link(page, "prev") == "/console?limit=2&offset=4"
    assert _link(page, "next") is None
    last = client.get(_fragment(_link(page, "prev"))).text
    assert len(_rows(last)) == 1 and _range(last) == "5–5 of 5"
    middle = client.get("/console/fragments/fleet", params={"limit": 2, "offset": 2}).text
    assert _range(middle) == "3–4 of 5"
    assert _link(middle, "prev") == "/console?limit=2"


def test_a_servers_page_past_the_end_says_so(client: TestClient) -> None:
    total = len(client.get("/servers").json())
    page = client.get("/console/fragments/servers", params={"offset": 999}).text
    assert _range(page, "servers-range") == f"none of {total} at offset 999"
    assert '<a href="/console/servers" rel="prev">' in page
    first = client.get("/console/fragments/servers").text
    assert _range(first, "servers-range") == f"1–{total} of {total}"


def test_the_console_names_its_icon_so_browsers_do_not_ask_for_favicon_ico(
        client: TestClient) -> None:
    # found by a tester: every new browser session logged a 404 for /favicon.ico
    shell = client.get("/console").text
    icon = re.search(r'<link rel="icon" href="([^"]+)"', shell).group(1)
    answer = client.get(icon)
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/svg+xml"


def test_each_console_page_has_a_title_naming_it(client: TestClient) -> None:
    # found by a tester: every page, and so every tab and bookmark, was "vmledger console"
    vm = "930896af-bf8c-48d4-885c-6573a94b1853"
    titles = {path: re.search(r"<title>([^<]*)</title>", client.get(path).text).group(1)
              for path in ("/console", "/console/servers", "/console/audit",
                           f"/console/vms/{vm}")}
    assert titles == {"/console": "Fleet · vmledger console",
                      "/console/servers": "Servers and networks · vmledger console",
                      "/console/audit": "Audit · vmledger console",
                      f"/console/vms/{vm}": f"VM {vm} · vmledger console"}
