"""Triton's own VMAPI client against a real vmledger: `sdc-clients` 13.0.6 from the npm registry,
its ``VMAPI`` class unchanged, driven by ``vmapi_client/drive.js`` against ``vmledger serve``
(api.md, "VMAPI client compatibility"; docs/vmapi-compatibility.md).

The client is installed once per test session into a temporary folder. The test is skipped
only where ``node`` or ``npm`` is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli import stop_processes, vmledger_process
from tests.waiting import wait_until
from tests.integration.processes import free_port

# long runs of real processes: .ci/slow.sh runs them, the default run leaves them out
pytestmark = pytest.mark.slow

CLIENT = "sdc-clients@13.0.6"
DRIVE_JS = Path(__file__).parent / "vmapi_client" / "drive.js"
NPM_TIMEOUT_S = 300
DRIVE_TIMEOUT_S = 170
# drive.js resolves *.vmledger.test itself; a proxy from the environment would take the
# requests elsewhere.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NODE_OPTIONS")


@pytest.fixture(scope="session")
def client_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``node_modules`` holding the published VMAPI client, installed once per session."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run Triton's VMAPI client "
                    f"(node: {node or 'absent'}, npm: {npm or 'absent'})")
    folder = tmp_path_factory.mktemp("vmapi-client")
    try:
        installed = subprocess.run(
            [npm, "install", "--ignore-scripts", "--no-audit", "--no-fund", CLIENT],
            cwd=folder, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"npm install {CLIENT} took more than {NPM_TIMEOUT_S} s")
    modules = folder / "node_modules"
    if installed.returncode != 0 or not (modules / "sdc-clients" / "lib" / "vmapi.js").exists():
        pytest.fail(f"npm install {CLIENT} failed ({installed.returncode}):\n"
                    f"{installed.stdout[-3000:]}\n{installed.stderr[-3000:]}")
    return modules


@pytest.fixture
def vmledger(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """``vmledger serve`` (embedded: SQLite in ``tmp_path``, simulated fleet, worker in-process)
    on a free loopback port; yields the port and the server's log file."""
    port = free_port()
    log_path = tmp_path / "serve.log"
    server = vmledger_process(
        "serve", "--port", str(port), log_path=log_path,
        database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
        env={"VMLEDGER_PROJECTION_POLL_S": "0.01", "VMLEDGER_WORKER_POLL_S": "0.02"})
    try:
        wait_until(lambda: _answers(port) or server.poll() is not None, "vmledger serve",
                   log_path=log_path, timeout=60, interval=0.1)
        if server.poll() is not None:
            pytest.fail(f"vmledger serve ended:\n{_tail(log_path)}")
        yield port, log_path
    finally:
        stop_processes([server])


def test_tritons_vmapi_client_works_unchanged_against_vmledger(
        client_modules: Path, vmledger: tuple[int, Path]) -> None:
    port, log_path = vmledger
    env = {name: value for name, value in os.environ.items() if name not in PROXY_VARIABLES}
    env.update({"VMAPI_CLIENT_MODULES": str(client_modules), "VMLEDGER_PORT": str(port)})
    try:
        drive = subprocess.run(["node", str(DRIVE_JS)], env=env, capture_output=True, text=True,
                               timeout=DRIVE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"drive.js took more than {DRIVE_TIMEOUT_S} s:\n{_text(timeout.stdout)}\n"
                    f"{_text(timeout.stderr)}\n--- vmledger serve ---\n{_tail(log_path)}")
    assert drive.returncode == 0, (
        f"drive.js exited {drive.returncode}:\n{drive.stdout}\n{drive.stderr}\n"
        f"--- vmledger serve (last lines) ---\n{_tail(log_path)}"
    )
    print(drive.stdout)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, size: int = 4000) -> str:
    return path.read_text(errors="replace")[-size:] if path.exists() else "(no log)"


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
