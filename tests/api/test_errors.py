"""Errors map to HTTP in one place (service/api/errors.py, ``ERRORS``): every DomainError
subclass, found recursively, answers a documented 4xx, 409, 412 or 503, never a 500."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import domain
import projections
import service
from domain import rules
from domain.alias_hold import AliasHoldNotFoundError, DuplicateAliasError
from domain.errors import (
    DomainError,
    DuplicateVmError,
    IllegalTransitionError,
    InvalidTransitionError,
    JobNotFoundError,
    JobNotRunnableError,
    NothingToUpdateError,
    ServerNotFoundError,
    ServerRemovedError,
    StaleGenerationError,
    UnallocatedVmError,
    UpdatePendingError,
    UuidTakenError,
    ValidationError,
    VersionMismatchError,
    VmAlreadyDestroyedError,
    VmBeingDestroyedError,
    VmNotFoundError,
    VolumeNotFoundError,
)
from domain.network import NetworkFullError
from domain.server import InsufficientCapacityError
from domain.states import VmState
from service.api import error_handlers, errors
from service.commands.networks import NetworkNotFoundError
from tests.builders import cause, vm_in
from tests.domain.test_vm_lifecycle import _stopped_on_no_server

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_STATUSES = {400, 404, 409, 412, 422, 503}

# One instance of every DomainError subclass; a new subclass must be added here (the first
# test fails until it is), and so gets its row checked.
SAMPLES: dict[type[DomainError], DomainError] = {
    VmNotFoundError: VmNotFoundError("vm-1"),
    JobNotFoundError: JobNotFoundError("job-1"),
    ServerNotFoundError: ServerNotFoundError("server-1"),
    ServerRemovedError: ServerRemovedError("server-1", "reboot"),
    VolumeNotFoundError: VolumeNotFoundError("volume-1"),
    InvalidTransitionError: InvalidTransitionError("destroyed", "start", []),
    IllegalTransitionError: IllegalTransitionError("stopped", "Failed", has_server=False),
    UnallocatedVmError: UnallocatedVmError("provisioning", "stop"),
    VmAlreadyDestroyedError: VmAlreadyDestroyedError("vm-1"),
    VmBeingDestroyedError: VmBeingDestroyedError("running", "start", "job-1", "queued"),
    DuplicateVmError: DuplicateVmError("vm-1"),
    VersionMismatchError: VersionMismatchError(3, 4),
    UpdatePendingError: UpdatePendingError(4, "job-1", "queued"),
    ValidationError: ValidationError("ram", "Invalid", "must be positive"),
    UuidTakenError: UuidTakenError("vm-1"),
    NothingToUpdateError: NothingToUpdateError("vm-1"),
    JobNotRunnableError: JobNotRunnableError("job-1", "leased by w2"),
    StaleGenerationError: StaleGenerationError("server-1", 3, 5),
    InsufficientCapacityError: InsufficientCapacityError("server-1", "not enough RAM"),
    NetworkFullError: NetworkFullError("network-1"),
    NetworkNotFoundError: NetworkNotFoundError("network-1"),
    AliasHoldNotFoundError: AliasHoldNotFoundError("hold-1"),
    DuplicateAliasError: DuplicateAliasError("web"),
}


def _every_module_imported() -> None:
    for package in (domain, projections, service):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.endswith("__main__"):  # that one runs the CLI
                importlib.import_module(module.name)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def _documented() -> dict[str, tuple[str, str]]:
    """``{error class: (status, code)}`` from the error table of docs/api.md."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("## The error table", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| `(\w+)` \|", section, re.MULTILINE)
    return {name: (status.strip(), code) for name, status, code in rows}


def test_every_domain_error_subclass_has_a_sample_here() -> None:
    _every_module_imported()
    assert _subclasses(DomainError) == set(SAMPLES)


@pytest.mark.parametrize("error_class", sorted(SAMPLES, key=lambda c: c.__name__))
def test_every_domain_error_has_a_documented_row_and_no_500(error_class) -> None:
    row = errors.row_for(error_class)
    assert row is not None, f"{error_class.__name__} has no row in service/api/errors.py"
    assert row.status == errors.VALIDATION or row.status in DOCUMENTED_STATUSES
    status = "409 (v1) / 422 (v2)" if row.status == errors.VALIDATION else str(row.status)
    assert _documented().get(error_class.__name__) == (status, row.code)


def test_a_row_is_found_along_the_mro() -> None:
    class Special(VmNotFoundError):
        pass

    assert errors.row_for(Special) is errors.ERRORS[VmNotFoundError]
    assert errors.row_for(DomainError) is None  # the base itself: a bug, answered 500


@pytest.fixture
def raising() -> TestClient:
    app = FastAPI()
    error_handlers.install(app)

    @app.get("/raise/{name}")
    def raise_(name: str) -> None:
        raise next(e for cls, e in SAMPLES.items() if cls.__name__ == name)

    @app.get("/unmapped")
    def unmapped() -> None:
        raise DomainError("a refusal nobody mapped")

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("error_class", sorted(SAMPLES, key=lambda c: c.__name__))
def test_the_handler_answers_every_domain_error_by_its_row(raising, error_class) -> None:
    row = errors.row_for(error_class)
    response = raising.get(f"/raise/{error_class.__name__}")
    # This bare app negotiates no API version: bad input answers as version 1 does, 409.
    assert response.status_code == (409 if row.status == errors.VALIDATION else row.status)
    assert response.json()["code"] == row.code and response.json()["message"]


def test_a_domain_error_with_no_row_is_a_logged_500(raising, caplog) -> None:
    response = raising.get("/unmapped")
    assert response.status_code == 500
    assert response.json()["code"] == "InternalError"
    assert "unmapped error" in caplog.text


def test_state_refusals_carry_the_state_and_the_allowed_actions(raising) -> None:
    body = raising.get("/raise/IllegalTransitionError").json()
    assert body["code"] == "InvalidTransition" and body["state"] == "stopped"
    # a stopped VM on no server: what it allows, not what one on a server would
    on_none = ["stop", "kill", "update", "destroy", "quarantine"]  # stop, kill: already
    assert body["allowed_actions"] == on_none
    on_its_server = ["start", "stop", "kill", "update", "add_nics", "remove_nics", "destroy",
                     "quarantine"]
    for has_server, allowed in ((True, on_its_server), (False, on_none)):
        refusal = IllegalTransitionError("stopped", "Failed", has_server=has_server)
        assert errors._state_refusal(refusal)["allowed_actions"] == allowed
    body = raising.get("/raise/VersionMismatchError")
    assert body.status_code == 412 and body.json()["current_version"] == 4
    assert body.headers["etag"] == '"4"'


def test_an_update_pending_refusal_names_the_job_and_what_to_do(raising) -> None:
    """The version matched: the 412 says why it is refused all the same, which job to wait
    for and how, in the shape of every other 412 (``current_version``, ``ETag``)."""
    answer = raising.get("/raise/UpdatePendingError")
    assert answer.status_code == 412 and answer.headers["etag"] == '"4"'
    body = answer.json()
    assert body["code"] == "PreconditionFailed" and body["current_version"] == 4
    assert body["pending_job_uuid"] == "job-1"
    assert body["message"] == (
        "the VM's update job job-1 is queued: the alias, metadata and tags you read do not "
        "show its changes yet; wait for it (GET /jobs/job-1/wait) and read the VM again")


@pytest.mark.parametrize("on_a_server", [True, False])
def test_a_refusal_of_a_vm_lists_what_that_vm_allows(on_a_server) -> None:
    """A lifecycle fact refused (IllegalTransitionError, its raiser's has_server) answers with
    the actions this VM allows: start for a stopped VM on a server, not for one on none."""
    vm = vm_in(VmState.STOPPED) if on_a_server else _stopped_on_no_server()
    with pytest.raises(IllegalTransitionError) as refused:
        vm.record_released(cause=cause())
    allowed = errors._state_refusal(refused.value)["allowed_actions"]
    assert allowed == rules.allowed_actions(VmState.STOPPED, has_server=on_a_server)
    assert ("start" in allowed) is on_a_server
