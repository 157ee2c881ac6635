"""A production-mode deployment on PostgreSQL whose job workers a test kills with ``kill -9``:
one ``project``, one ``serve``, any number of ``work`` processes (each worker's id carries its
process id, so the test can kill the one that holds a job), and the test's own ``Services``
on the same database to read the log and the simulated fleet (copies, incarnations, boots).

The lease is short (``LEASE_S``) so a killed worker's job is taken over within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from service.container import Services
from service.settings import Settings
from tests.api.helpers import vm_body
from tests.cli import stop_processes, vmledger_process
from tests.integration.processes import free_port
from tests.waiting import wait_until

LEASE_S = 2.0
POLL_S = 0.05
SIM_SERVERS = 4


class Deployment:
    """The processes, an HTTP client of the API, and the test's own ``Services``."""

    def __init__(self, database_url: str, log_path: str, env: dict[str, str]):
        self.database_url = database_url
        self.log_path = log_path
        self.env = env
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.others: list[subprocess.Popen[bytes]] = []
        self.http: httpx.Client
        self.services: Services

    def add_worker(self) -> int:
        """Start one more ``vmledger work``; its pid."""
        process = vmledger_process("work", env=self.env, log_path=self.log_path)
        self.workers[process.pid] = process
        return process.pid

    def kill9(self, pid: int) -> None:
        """``kill -9`` the worker ``pid`` (its session: nothing of it survives)."""
        process = self.workers.pop(pid)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def holder(self, vm_uuid: str) -> int | None:
        """The pid of the worker holding the VM's head job, if a live worker does."""
        head = self.services.commands.load(vm_uuid).head_job
        if head is None or head["execution"] != "running" or not head.get("worker"):
            return None
        pid = int(str(head["worker"]).split("-")[1])
        return pid if pid in self.workers else None

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        wait_until(condition, what=what, log_path=self.log_path, timeout=timeout)

    def job(self, job_uuid: str) -> dict[str, Any]:
        return self.http.get(f"/jobs/{job_uuid}").json()

    def job_ended(self, job_uuid: str) -> bool:
        return self.job(job_uuid).get("execution") in ("succeeded", "failed", "canceled")

    def running_vm(self) -> str:
        """A VM provisioned and running."""
        created = self.http.post("/vms", json=vm_body())
        assert created.status_code == 202, created.text
        self.wait(lambda: self.job_ended(created.json()["job_uuid"]), "the provision")
        return created.json()["vm_uuid"]

    def act(self, vm_uuid: str, action: str) -> str:
        answer = self.http.post(f"/vms/{vm_uuid}", params={"action": action})
        assert answer.status_code == 202, answer.text
        return answer.json()["job_uuid"]


@contextmanager
def deployment(database_url: str, tmp_dir: str, *, workers: int = 1,
               extra_env: dict[str, str] | None = None) -> Iterator[Deployment]:
    """Start the deployment; stop (or kill) everything afterwards."""
    env = {**os.environ, "VMLEDGER_DATABASE_URL": database_url,
           "VMLEDGER_EMBEDDED_RUNNERS": "false", "VMLEDGER_PROJECTION_POLL_S": "0.02",
           "VMLEDGER_WORKER_POLL_S": str(POLL_S), "VMLEDGER_JOB_LEASE_S": str(LEASE_S),
           "VMLEDGER_SIM_SERVERS": str(SIM_SERVERS), "VMLEDGER_LOG_FORMAT": "text",
           **(extra_env or {})}
    log_path = os.path.join(tmp_dir, "deployment.log")
    settings = Settings(database_url=database_url, sim_servers=SIM_SERVERS)
    services = Services.build(settings)  # creates the schema before the processes start
    port = free_port()
    system = Deployment(database_url, log_path, env)
    system.services = services
    try:
        system.others.append(vmledger_process("project", env=env, log_path=log_path))
        system.others.append(vmledger_process("serve", "--port", str(port), env=env,
                                              log_path=log_path))
        for _ in range(workers):
            system.add_worker()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            system.http = http
            wait_until(lambda: _answers(http), "the API", log_path=log_path, timeout=60)
            yield system
    finally:
        stop_processes([*system.workers.values(), *system.others])
        services.close()


def _answers(http: httpx.Client) -> bool:
    try:
        return http.get("/ping", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
