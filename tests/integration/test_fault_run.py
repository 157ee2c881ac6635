"""The fault run (issue #13; docs/jobs.md, "The fault run"): real processes on PostgreSQL,
three ``vmledger work`` under load with a slow simulated driver; 20 ``kill -9`` of a worker at
random moments, then 20 right after each kind of compute effect (provision, start, stop,
reboot) ran on the host and before its worker recorded it, then answers lost after the work
(``lose_response``), as many in a row as a step has attempts, ten times. Then: no VM stuck
past lease + poll (from the log: how late each takeover came after the lease it took over ran
out), no VM booted or rebooted twice (the host's boot count of every VM equals the boots the log
records), no job lost (every acknowledged job ended), and the log agrees with the host. Last,
the outage timings through a TCP proxy (refused, silent partition). Figures are printed (run
with ``-rP``: ``.ci/faults.sh``).

Marked ``faults`` (and ``slow``): left out of the default run, it is a step of its own in CI.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime

import pytest

from domain.vm import Vm
from tests.api.helpers import vm_body
from tests.builders import stream
from tests.conftest import _empty_schema
from tests.integration.kill9 import LEASE_S, POLL_S, Deployment, deployment
from tests.integration.outages import measure, served_through_a_proxy

pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.postgres]

VMS = 6
KILLS = 20
EFFECTS = ("provision", "start", "stop", "reboot")
SLOW_ANSWER_S = 0.6  # after each ensure_state's work: the window to kill in
PHASE_TIMEOUT_S = 120.0
# Then answers lost after the work (docs/jobs.md, "An answer lost on the last attempt"): this
# many rounds of as many lost answers as a step has attempts (the deployment's default), taken
# by whichever steps run, so some steps lose every one: the log must still agree with the host.
LOST_ROUNDS = 10
STEP_ATTEMPTS = 3
# A takeover comes when a worker next looks (poll) once the lease ran out; a worker busy with
# a job finishes that first (a job here: a few slow operations, each answered SLOW_ANSWER_S
# after its work, under 3 s). Seen: 2.9 s on a quiet machine, 7.9 s on one shared by seven
# test runs (every process slower): the bound leaves room for that.
TAKEOVER_SLACK_S = POLL_S + 10.0
BOOT_EVENTS = (Vm.Provisioned, Vm.Started, Vm.Rebooted)


def asked_after_every_answer_lost(job: dict) -> bool:
    """Whether the job has a step whose every attempt lost the node's answer, followed by a
    ``reconcile`` step: the node asked what it did (``lost_answers.settle_unknown``; a
    provision's takeover with none left, row L8)."""
    chain = job.get("chain_results") or []
    for at, step in enumerate(chain):
        tries = chain[at - STEP_ATTEMPTS:at] if at >= STEP_ATTEMPTS else []
        if step["name"] == "reconcile" and tries and all(
                "its response was lost after the work" in (tried["error"] or "")
                and tried["name"] == tries[0]["name"] for tried in tries):
            return True
    return False


class Load:
    """Keeps the VMs busy, short of saturating the workers (a saturated queue would make
    every job wait, takeovers too): when a VM's last job ended, the next of stop, start,
    reboot; and, while ``creating``, new VMs (provisioned only). Remembers every acknowledged
    job."""

    def __init__(self, system: Deployment, vms: list[str]):
        self.system = system
        self.vms = list(vms)
        self.jobs: list[str] = []
        self.last: dict[str, str] = {}
        self.creating = False
        self.created: list[str] = []  # provisioned only: the cycling VMs are the load
        self.stop = threading.Event()
        self._next = {vm: 0 for vm in vms}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        http = self.system.http
        while not self.stop.is_set():
            if self.creating and len(self.created) < KILLS * 2:
                created = http.post("/vms", json=vm_body())
                if created.status_code == 202:
                    body = created.json()
                    self.created.append(body["vm_uuid"])
                    self.jobs.append(body["job_uuid"])
            for vm in list(self.vms):
                last = self.last.get(vm)
                if last is not None and not self.system.job_ended(last):
                    continue
                action = ("stop", "start", "reboot")[self._next[vm] % 3]
                self._next[vm] += 1
                answer = http.post(f"/vms/{vm}", params={"action": action})
                if answer.status_code == 202:
                    self.jobs.append(answer.json()["job_uuid"])
                    self.last[vm] = answer.json()["job_uuid"]
            self.stop.wait(0.1)


def effect_done_unrecorded(system: Deployment, kind: str, killed: set[str]
                           ) -> tuple[str, int] | None:
    """A running job of ``kind`` (not one in ``killed``) whose effect is on the host and not
    yet in the log, with the pid of the worker holding it; None if there is none right now."""
    with system.services.db.transaction(commit=False) as tx:
        tx.execute("SELECT uuid, vm_uuid FROM job_view WHERE execution = 'running' AND name = ?",
                   (kind,))
        running = tx.fetchall()
    for row in running:
        if row["uuid"] in killed:
            continue
        copies = system.services.fleet.copies(row["vm_uuid"])
        if kind == "stop":
            done = any(c["state"] == "stopped" for c in copies)
        else:
            done = any(c["booted_by"] == row["uuid"] for c in copies)
        if not done:
            continue
        head = system.services.commands.load(row["vm_uuid"]).head_job
        if head is None or head["uuid"] != row["uuid"] or head["execution"] != "running" \
                or "ensure_state" in head.get("steps_done", []):
            continue
        pid = system.holder(row["vm_uuid"])
        if pid is not None:
            return row["uuid"], pid
    return None


def takeover_lateness(system: Deployment, vm_uuid: str) -> list[float]:
    """For each takeover of the VM's jobs, how long after the lease it took over ran out it
    came (s)."""
    lease_ends: dict[str, datetime] = {}
    late: list[float] = []
    for event in stream(system.services, vm_uuid):
        if isinstance(event, Vm.JobStarted):
            if event.attempt > 1 and event.job_uuid in lease_ends:
                late.append((event.timestamp - lease_ends[event.job_uuid]).total_seconds())
            lease_ends[event.job_uuid] = _aware(event.lease_expires_at)
        elif isinstance(event, Vm.JobLeaseRenewed):
            lease_ends[event.job_uuid] = _aware(event.lease_expires_at)
    return late


def _aware(moment: datetime | str) -> datetime:
    return datetime.fromisoformat(moment) if isinstance(moment, str) else moment


def test_kill_9_at_random_and_right_after_each_effect_loses_nothing_and_repeats_nothing(
        postgres_url, tmp_path):
    _empty_schema(postgres_url)
    began = time.monotonic()
    kills: dict[str, int] = {}
    with deployment(postgres_url, str(tmp_path), workers=3,
                    extra_env={"VMLEDGER_SIM_LATENCY_S": "0.05",
                               "VMLEDGER_JOB_MAX_ATTEMPTS": "5"}) as system:
        fleet = system.services.fleet
        vms = [system.running_vm() for _ in range(VMS)]
        with Load(system, vms) as load:
            rng = random.Random(13)
            for _ in range(KILLS):  # at random moments
                time.sleep(rng.uniform(0.1, 0.8))
                system.kill9(rng.choice(list(system.workers)))
                system.add_worker()
            kills["random"] = KILLS
            fleet.faults.set_latency_after(SLOW_ANSWER_S, "ensure_state")
            killed: set[str] = set()  # each effect kill is of another job
            for kind in EFFECTS:  # right after the effect, before its record
                load.creating = kind == "provision"
                kills[kind] = 0
                deadline = time.monotonic() + PHASE_TIMEOUT_S
                while kills[kind] < KILLS:
                    assert time.monotonic() < deadline, f"only {kills[kind]} {kind} kills"
                    found = effect_done_unrecorded(system, kind, killed)
                    if found is None:
                        time.sleep(0.02)
                        continue
                    killed.add(found[0])
                    system.kill9(found[1])
                    system.add_worker()
                    kills[kind] += 1
            load.creating = False
            fleet.faults.set_latency_after(0.0, "ensure_state")
            for _ in range(LOST_ROUNDS):  # answers lost after the work, every attempt of some
                fleet.faults.inject("ensure_state", "lose_response", STEP_ATTEMPTS)
                system.wait(lambda: not fleet.faults.pending(), "the lost answers", timeout=60)
        all_vms = load.vms + load.created

        def quiet() -> bool:
            return all(not system.services.commands.load(vm).active_jobs for vm in all_vms)

        system.wait(quiet, "every job to end", timeout=120)
        system.wait(lambda: all(system.job_ended(j) for j in load.jobs), "the job view")
        outcomes = [system.job(j)["execution"] for j in load.jobs]
        asked = sum(asked_after_every_answer_lost(system.job(j)) for j in load.jobs)
        late = [s for vm in all_vms for s in takeover_lateness(system, vm)]
        twice: list[tuple[str, int, int]] = []
        disagree: list[tuple[str, str, list[str]]] = []
        for vm_uuid in all_vms:
            booted = sum(isinstance(e, BOOT_EVENTS) for e in stream(system.services, vm_uuid))
            if fleet.boots(vm_uuid) != booted:
                twice.append((vm_uuid, fleet.boots(vm_uuid), booted))
            state = str(system.services.commands.load(vm_uuid).state)
            host = [str(c["state"]) for c in fleet.copies(vm_uuid)]
            if fleet.running_copies(vm_uuid) > 1 or (state == "running") != (host == ["running"]):
                disagree.append((vm_uuid, state, host))
    print(f"fault run: {sum(kills.values())} kill -9 ({kills}) and "
          f"{LOST_ROUNDS * STEP_ATTEMPTS} lost answers over {len(all_vms)} VMs and "
          f"{len(load.jobs)} jobs ({outcomes.count('succeeded')} succeeded, "
          f"{outcomes.count('failed')} failed) in {time.monotonic() - began:.0f} s; "
          f"{len(late)} takeovers, the latest {max(late, default=0):.2f} s after its lease "
          f"({LEASE_S} s) ran out")

    print(f"fault run: {asked} jobs lost a step's answer on every attempt and asked the node")
    assert len(load.jobs) == len(set(load.jobs))
    assert asked >= 1, "no step lost every answer: the lost-answer path did not run"
    assert set(outcomes) <= {"succeeded", "failed", "canceled"}, "a job was lost"
    assert twice == [], "booted or rebooted twice (vm, host boots, boots in the log)"
    assert disagree == [], "the log and the host disagree (vm, log state, host copies)"
    assert len(late) >= sum(kills.values()) // 2
    assert max(late, default=0) <= TAKEOVER_SLACK_S, "a VM was stuck past lease + poll"

    for kind in ("refuse", "black_hole"):
        _empty_schema(postgres_url)
        with served_through_a_proxy(postgres_url, str(tmp_path / f"{kind}.log")) as (base, proxy):
            outage = measure(base, proxy, kind)
        print(f"outage timings: {outage.summary()}")
        assert outage.slowest_answer_s < 3.5 and max(outage.recovered_s.values()) < 4.0
