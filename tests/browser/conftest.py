"""The console in a real browser: Debian's Chromium (``/usr/bin/chromium``) driven by
Playwright's Python package, against a live service (uvicorn on a free loopback port) holding a
replayed slice of the Google 2011 trace, with one token per role.

Without Chromium, Playwright or the trace these tests skip, saying which is missing, unless
``VMLEDGER_REQUIRE_BROWSER=1`` (set by ``.ci/console.sh``), which turns the skip into a failure.
Screenshots go to ``VMLEDGER_CONSOLE_SCREENSHOTS`` (default: the test session's temporary
directory); ``docs/console/*.png`` are such screenshots.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.app import create_app
from service.container import Services
from service.replay.run import catch_up, replay
from service.settings import Settings
from tests.trace import MISSING, TRACE
from tests.waiting import wait_until

CHROMIUM = Path(os.environ.get("VMLEDGER_CHROMIUM", "/usr/bin/chromium"))
REQUIRE_BROWSER = os.environ.get("VMLEDGER_REQUIRE_BROWSER") == "1"
# Jobs 3,834..3,850 of the shard (as tests/integration/test_replay.py): 859 VMs of 6 owners,
# with evictions, crashes and restarts, so some VMs have tens of versions.
SKIP_JOBS, MAX_JOBS = 3833, 17
ROLES = ("operator", "auditor", "analyst", "owner_a", "owner_b")
THIRD_OWNER = "7d1f1d2a-3b4c-4d5e-8f60-718293a4b5c6"  # owns what the tests add to the trace


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[browser]')"
    if not CHROMIUM.is_file():
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium chromium-driver)"
    if not TRACE.is_file():
        return MISSING
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test here ``browser``; skip them (or fail, under REQUIRE_BROWSER) when
    something they need is missing."""
    reason = _missing()
    for item in items:
        if "tests/browser/" not in str(item.path).replace(os.sep, "/"):
            continue
        item.add_marker(pytest.mark.browser)
        if reason and not REQUIRE_BROWSER:
            item.add_marker(pytest.mark.skip(reason=f"browser tests: {reason}"))


@dataclass
class Console:
    """A live service with the console, and what the tests need to check it."""

    url: str
    services: Services
    tokens: dict[str, str]  # role name -> token
    owners: dict[str, str]  # "owner_a"/"owner_b" -> owner_uuid
    screenshots: Path
    timings: list[dict[str, Any]] = field(default_factory=list)  # sign-in to a loaded page

    def api(self, role: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call the API as ``role``."""
        headers = {"Authorization": f"Bearer {self.tokens[role]}", **kwargs.pop("headers", {})}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def get(self, role: str, path: str, **params: Any) -> Any:
        """GET ``path`` as ``role``; asserts 200 and returns the JSON body."""
        response = self.api(role, "GET", path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


def _tokens_json(tokens: dict[str, str], owners: dict[str, str]) -> str:
    entries = []
    for name, token in tokens.items():
        role = "owner" if name.startswith("owner") else name
        entry = {"name": name, "role": role, "sha256": hashlib.sha256(token.encode()).hexdigest()}
        if role == "owner":
            entry["owner_uuid"] = owners[name]
        entries.append(entry)
    return json.dumps(entries)


def _two_owners(services: Services) -> dict[str, str]:
    """The two owners with the most VMs in the slice."""
    with services.db.transaction(commit=False) as tx:
        tx.execute("SELECT owner_uuid, COUNT(*) AS n FROM vm_view GROUP BY owner_uuid "
                   "ORDER BY n DESC, owner_uuid LIMIT 2")
        first, second = (row["owner_uuid"] for row in tx.fetchall())
    return {"owner_a": first, "owner_b": second}


class _Server:
    """uvicorn serving ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Any):
        import uvicorn

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                                    timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), "uvicorn to start")
        assert self.server.started, "uvicorn ended before it started"
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.socket.close()


@pytest.fixture(scope="session")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """The service over a replayed slice of the trace (SQLite), one token per role, the
    projection runner in the background (no job worker: the console only reads)."""
    reason = _missing()
    if reason:
        pytest.fail(f"browser tests: {reason} (VMLEDGER_REQUIRE_BROWSER=1)")
    folder = tmp_path_factory.mktemp("console")
    settings = Settings(database_url=f"sqlite:///{folder / 'vmledger.db'}", sim_servers=2,
                        projection_poll_s=0.01, read_timeout_s=10.0)
    services = Services.build(settings)
    summary = replay(services, TRACE, skip_jobs=SKIP_JOBS, max_jobs=MAX_JOBS)
    catch_up(services, summary)
    owners = _two_owners(services)
    tokens = {name: f"console-test-token-{name}" for name in ROLES}
    settings = settings.model_copy(update={"tokens": _tokens_json(tokens, owners)})
    services.settings = settings
    services.start_background(projections=True, worker=False)
    shots = Path(os.environ.get("VMLEDGER_CONSOLE_SCREENSHOTS") or folder / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    try:
        with _Server(create_app(settings, services=services, background=False)) as url:
            found = Console(url, services, tokens, owners, shots)
            _quarantine_one(found)
            _add_a_network(found)
            yield found
            # an artifact beside the screenshots, for the record (no test times anything)
            (shots / "timings.json").write_text(json.dumps(found.timings, indent=2))
    finally:
        services.close()


def _add_a_network(console: Console) -> None:
    """An operator records a network, and a VM of a third owner takes an address on it (the
    trace has no networks)."""
    response = console.api("operator", "POST", "/networks", json={
        "name": "external", "subnet": "10.88.0.0/24", "gateway": "10.88.0.1",
        "provision_start_ip": "10.88.0.10", "provision_end_ip": "10.88.0.250"})
    assert response.status_code == 201, response.text
    created = console.api("operator", "POST", "/vms", json={
        "owner_uuid": THIRD_OWNER, "brand": "joyent", "ram": 256,
        "networks": [response.json()["uuid"]]})
    assert created.status_code == 202, created.text


def _quarantine_one(console: Console) -> None:
    """An operator quarantines one running VM of the second owner (the trace has none)."""
    vm = console.get("operator", "/vms", owner_uuid=console.owners["owner_b"], state="running",
                     limit=1, sort="create_timestamp.asc")[0]
    response = console.api("operator", "POST", f"/vms/{vm['uuid']}",
                           params={"action": "quarantine"}, json={"reason": "console test"})
    assert response.status_code == 200, response.text


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Chromium, headless, from the system's package (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    """A fresh tab (its own session storage), 1280 wide; fails the test on any request that
    leaves the service (the console loads nothing from anywhere else)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    foreign: list[str] = []
    tab.on("request", lambda request: None if request.url.startswith(console.url)
           else foreign.append(request.url))
    try:
        yield tab
    finally:
        context.close()
    assert foreign == [], foreign


def sign_in(page: Any, console: Console, role: str, path: str = "/console") -> None:
    """Open ``path`` and sign in with ``role``'s token through the form; waits until the
    page's fragment has loaded, and records how long the signed-in page took."""
    page.goto(f"{console.url}{path}")
    page.locator("#login input[name=token]").fill(console.tokens[role])
    started = time.perf_counter()
    page.locator("#login button[type=submit]").click()
    page.wait_for_selector("#content[data-status]")
    console.timings.append({"path": path, "role": role,
                            "seconds": round(time.perf_counter() - started, 3)})


def screenshot(page: Any, console: Console, name: str) -> Path:
    """Save a screenshot of the page's first screen as ``NAME.png`` among the artifacts."""
    path = console.screenshots / f"{name}.png"
    page.screenshot(path=str(path))
    return path

