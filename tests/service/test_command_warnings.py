"""What a command that prints its result writes on stderr besides it (docs/operations.md,
"Logs"): the connection noise of an outage is left out (tests/changes/test_cli_outage.py),
vmledger's own warnings are not, above all those that tell of a log edited behind its back.

``vmledger history`` reads the stream's events, never a snapshot, and ``audit verify`` names a
changed snapshot on stdout; what loads a VM (``replay``, an operator's command) goes through
the same logging as this test's process does (``setup_command_logging``)."""

from __future__ import annotations

import subprocess
import sys
from uuid import UUID

from service.logs import OUTAGE_NOISE
from tests.api.helpers import act_and_wait, create_running_vm
from tests.cli import environment
from tests.tampering import edit_snapshot

COMMAND = """
import logging, sys
from service.cli.app import _services
from service.logs import OUTAGE_NOISE, setup_command_logging
setup_command_logging()
for name in OUTAGE_NOISE:
    logging.getLogger(name).warning("an outage's noise")
services = _services(register_fleet=False, writes=False)
try:
    print(services.commands.load(sys.argv[1]).alias)
finally:
    services.close()
"""


def test_a_refused_snapshots_warning_reaches_a_commands_stderr_and_outage_noise_does_not(
        client, services) -> None:
    """A snapshot whose seal does not match its content was edited: the command's load folds
    the events instead, and stderr says so in one line; the outage loggers' warnings do not
    reach it (their errors would)."""
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "update", json={"alias": "sealed"})
    version = services.commands.load(vm_uuid).version
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    edit_snapshot(services, vm_uuid, b'"sealed"', b'"5ealed"')
    done = subprocess.run([sys.executable, "-c", COMMAND, vm_uuid], capture_output=True,
                          text=True, timeout=120, check=False,
                          env=environment(None, services.settings.database_url))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sealed"  # folded from its events, not the edited snapshot
    [line] = done.stderr.strip().splitlines()
    assert f"snapshot of {vm_uuid} at version {version} refused (its seal does not match " \
           "its content)" in line, done.stderr
    assert "an outage's noise" not in done.stderr and len(OUTAGE_NOISE) == 4
