"""A stored event whose column holds another type than the event store writes (its state
text rather than bytes, as a plain ``replace()`` or even ``cast(state as text)`` in the
sqlite3 shell leaves it) is an unreadable event, damage to the log like any other: 503 naming
it on every load, one line from the CLI, and an audit finding that says what is wrong. It
answered 500, a traceback (``string argument without an encoding``) and ``AttributeError:
'str' object has no attribute 'decode'`` (auditor tester). SQLite only: PostgreSQL's typed
columns refuse such an edit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from projections.formats import rfc3339
from service.audit.verify import verify_chains
from tests.api.helpers import assert_error, create_running_vm
from tests.cli import vmledger
from tests.tampering import cast_event_column

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

CASTS = {"state as text": ("state", "text"), "topic as blob": ("topic", "blob")}
WORDS = {"state": "its state is stored as text, not bytes",
         "topic": "its topic is stored as bytes, not text"}


@pytest.mark.parametrize("cast", CASTS.values(), ids=CASTS.keys())
def test_every_load_of_an_event_of_the_wrong_type_is_503_naming_it(client, services,
                                                                    cast) -> None:
    vm_uuid = create_running_vm(client)
    cast_event_column(services, vm_uuid, 3, *cast)
    for path, params in ((f"/vms/{vm_uuid}", {"version": 4}),
                         (f"/vms/{vm_uuid}", {"at": rfc3339(datetime.now(UTC))}),
                         (f"/vms/{vm_uuid}/history", {})):
        body = assert_error(client.get(path, params=params), 503, "Unavailable")
        message = body["message"]
        assert f"stream {vm_uuid} has an unreadable event at version 3" in message, body
        assert WORDS[cast[0]] in message and "the log needs repair" in message, body


def test_vmledger_history_of_a_state_stored_as_text_is_one_line(client, services) -> None:
    vm_uuid = create_running_vm(client)
    cast_event_column(services, vm_uuid, 3, "state", "text")
    done = vmledger("history", vm_uuid, database_url=services.settings.database_url,
                    env={"VMLEDGER_LOG_FORMAT": "text"})
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"vmledger history: stream {vm_uuid} has an unreadable event at "
                           "version 3") and WORDS["state"] in line, done.stderr


@pytest.mark.parametrize("cast", CASTS.values(), ids=CASTS.keys())
def test_audit_says_which_column_holds_the_wrong_type(client, services, cast) -> None:
    vm_uuid = create_running_vm(client)
    cast_event_column(services, vm_uuid, 3, *cast)
    [finding] = verify_chains(services.app)
    assert (finding.where, finding.version, finding.kind) == (
        f"stream {vm_uuid}", 3, "undecodable")
    assert finding.detail.startswith(WORDS[cast[0]]), finding.detail
    assert "edited behind the service's back" in finding.detail

