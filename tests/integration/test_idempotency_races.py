"""An ``Idempotency-Key``'s answer is its first answer, even when the request's twin commits
in another process between this one's key read and its load (docs/architecture.md,
"Idempotency keys across processes").

Two service instances on one PostgreSQL database, each with its own pool, committer and
aggregate cache, are what two HTTP processes (``serve --workers 2``) are: a committer's
turns serialise a stream's writers within its process only. A tester saw, 1 request in 12,
``409`` ``InvalidTransition`` for a release, ``412`` for a stop with ``If-Match`` and ``409``
``VmAlreadyDestroyed`` for a version 2 DeleteVm, all of requests whose key had been accepted.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError

from domain.errors import DomainError
from domain.states import Action
from service.commands.idempotency import IdempotencyKey
from service.commands.versioning import NEWEST
from service.container import Services
from service.settings import Settings
from tests.builders import cause, create, settle

pytestmark = [pytest.mark.postgres,
              pytest.mark.parametrize("database_url", ["postgres"], indirect=True)]


@pytest.fixture
def other(services: Services, settings: Settings) -> Iterator[Services]:
    """A second service instance on ``services``' database: another HTTP process."""
    built = Services.build(settings)
    try:
        yield built
    finally:
        built.close()


def _key(name: str = "k") -> IdempotencyKey:
    return IdempotencyKey("anonymous", f"{name}-{uuid.uuid4()}", "one request")


def _running_vm(services: Services) -> str:
    vm_uuid = create(services).vm_uuid
    settle(services)
    assert services.commands.load(vm_uuid).state == "running"
    return vm_uuid


def _quarantined_vm(services: Services) -> str:
    vm_uuid = _running_vm(services)
    services.quarantine.quarantine(vm_uuid, "troubleshooting", cause=cause())
    return vm_uuid


# Each case: (its setup on a service, the keyed request on a service given what the setup
# returned and the key, what of its answer must be the same for every copy of the request)
Keyed = Callable[[Services, Any, IdempotencyKey], Any]


def _release(services: Services, vm_uuid: str, key: IdempotencyKey) -> Any:
    return services.quarantine.release(vm_uuid, cause=cause(), idempotency=key)


def _vm_version(services: Services) -> tuple[str, int]:
    vm_uuid = _running_vm(services)
    return vm_uuid, services.commands.load(vm_uuid).version


def _stop_if_match(services: Services, vm: tuple[str, int], key: IdempotencyKey) -> Any:
    return services.commands.request_action(vm[0], Action.STOP, behaviour=NEWEST,
                                            cause=cause(), if_match=vm[1], idempotency=key)


def _server_removed(services: Services) -> str:
    vm_uuid = _running_vm(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    services.commands.remove_server(server_uuid, cause=cause())
    services.projections.catch_up()  # server_view, where a DeleteVm reads the removal
    return vm_uuid


def _v2_delete(services: Services, vm_uuid: str, key: IdempotencyKey) -> Any:
    return services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                            cause=cause(), idempotency=key)


def _volume_version(services: Services) -> tuple[str, int]:
    volume, _ = services.commands.create_volume(name="data", cause=cause())
    return str(volume.id), volume.version


def _attach_if_match(services: Services, volume: tuple[str, int], key: IdempotencyKey
                     ) -> Any:
    attached, _ = services.commands.attach_network(
        volume[0], "8f0e3d2c-1b4a-4c5d-9e6f-7a8b9c0d1e2f", "10.0.0.5", cause=cause(),
        if_match=volume[1], idempotency=key)
    return str(attached.id)  # a repeat answers the volume as it is now


def _server_version(services: Services) -> tuple[str, int]:
    server = services.commands.load_server(services.fleet.servers()[0].uuid)
    return str(server.id), server.version


def _remove_server_if_match(services: Services, server: tuple[str, int],
                            key: IdempotencyKey) -> Any:
    return services.commands.remove_server(server[0], cause=cause(), if_match=server[1],
                                           idempotency=key)


CASES: dict[str, tuple[Callable[[Services], Any], Keyed]] = {
    "release of a quarantined VM": (_quarantined_vm, _release),
    "stop with If-Match": (_vm_version, _stop_if_match),
    "v2 DeleteVm, its server removed": (_server_removed, _v2_delete),
    "attach a volume's network with If-Match": (_volume_version, _attach_if_match),
    "remove a server with If-Match": (_server_version, _remove_server_if_match),
}


@pytest.mark.parametrize("case", CASES)
def test_a_twin_committed_by_another_process_after_the_key_read_is_answered_as_first(
        services: Services, other: Services, monkeypatch: pytest.MonkeyPatch,
        case: str) -> None:
    """The other process's commit lands exactly between this one's key read (nothing yet)
    and its load, which sees the commit: the refusal the load would decide (409, 412) is not
    the key's answer; the first answer is."""
    setup, keyed = CASES[case]
    target, key = setup(other), _key()
    # this process decides on a load, which sees the twin's commit, not on a save of its own
    # read from no log (service/commands/aggregate_cache.py: a conflict at its append would
    # send it back to the key)
    monkeypatch.setattr(services.commands, "_cached_save", lambda _uuid: None)
    find, twin = services.commands.keys.find, []

    def the_twin_commits_after(key_read: IdempotencyKey) -> Any:
        found = find(key_read)
        if not twin:
            twin.append(keyed(other, target, key))
        return found

    monkeypatch.setattr(services.commands.keys, "find", the_twin_commits_after)
    answer = keyed(services, target, key)
    assert twin, "the twin request did not run"
    assert _same(answer) == _same(twin[0])


def test_a_twin_whose_commit_was_the_last_conflict_is_answered_as_first(
        services: Services, other: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's last attempt meets a conflict, the twin's commit: the request is not
    refused for its conflicts (``ConflictRetriesExhaustedError``), it gets the first answer."""
    vm, key = _vm_version(other), _key()
    twin: list[Any] = []

    def the_twin_commits_first(*_aggregates: Any, **_kwargs: Any) -> Any:
        twin.append(_stop_if_match(other, vm, key))
        raise IntegrityError("the twin's append took the version")

    monkeypatch.setattr(services.commands, "retries", 1)
    monkeypatch.setattr(services.commands.committer, "save", the_twin_commits_first)
    monkeypatch.setattr(services.commands.committer, "pause", lambda _seconds: None)
    answer = _stop_if_match(services, vm, key)
    assert _same(answer) == _same(twin[0])


def _same(answer: Any) -> Any:
    """What every copy of a request answers alike: a VM command's VM, job and version (not
    its log position: a repeat appended nothing)."""
    if hasattr(answer, "job_uuid"):
        return (answer.vm_uuid, answer.job_uuid, answer.version)
    if answer is None or isinstance(answer, int):  # a server's removal: its position, or none
        return "removed"
    return answer


TRIALS = 30
COPIES = 12


@pytest.mark.slow
@pytest.mark.parametrize("case", ["release of a quarantined VM", "stop with If-Match"])
def test_twelve_copies_of_a_keyed_request_in_two_processes_all_get_the_first_answer(
        services: Services, other: Services, case: str) -> None:
    """The tester's race, without HTTP: 12 threads, 6 in each process, released together,
    send the same keyed request; every one of them gets the same answer, trial after trial
    (before the fix, a refusal came within the first 3 trials of each case)."""
    setup, keyed = CASES[case]
    for trial in range(TRIALS):
        answers = _race((services, other), keyed, setup(services), _key(f"trial-{trial}"))
        assert len(set(answers)) == 1, f"trial {trial}: {answers}"


def _race(processes: tuple[Services, ...], keyed: Keyed, target: Any, key: IdempotencyKey
          ) -> list[Any]:
    """``COPIES`` threads, spread over ``processes``, released together by a barrier, each
    sending ``keyed`` once: what each got (``_same``), or the refusal it got instead."""
    barrier = threading.Barrier(COPIES)
    answers: list[Any] = [None] * COPIES

    def send(n: int) -> None:
        barrier.wait()
        try:
            answers[n] = _same(keyed(processes[n % len(processes)], target, key))
        except DomainError as refusal:  # the bug: a refusal of an accepted key
            answers[n] = repr(refusal)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(COPIES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers
