"""The composition root: builds the event store, read models, driver and worker from settings.

Nothing connects to a database at import time; ``Services.build`` does, once per process.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any
from dataclasses import dataclass, field
from uuid import UUID

from eventsourcing.persistence import PersistenceError

from domain.stuck import StuckThresholds
from domain.vm import make_cause
from projections.db import Database, Dialect
from projections.job_view import JobQueries, StuckCandidates
from projections.runner import ProjectionRunner, ReadModel
from projections.tracking import ProjectionConflictError
from projections.server_view import ServerQueries
from projections.vm_queries import VmQueries
from projections.network_view import NetworkQueries
from projections.volume_mounts import VolumeQueries
from service.commands.agents import Agents
from service.commands.application import Commands, VmLedger
from service.jobs.compute.recorded_removals import RecordedRemovalsRefused
from service.jobs.compute.simulated import SimulatedFleet
from service.commands.idempotency import IdempotencyStore
from service.logs import Throttled, setup_command_logging
from service.metrics import VERSION_CONFLICT_RETRIES, report_projection_lag
from service.service_read_models import READ_MODEL_NAMES, read_models  # noqa: F401 - the
# composition root's names, which the CLI and the audit import from here
from service.append_wakeups import own_connection_params
from service.projector_presence import ProjectorPresence, projector_running
from service.settings import Settings
from service.storage import PostgresLedgerRecorder, select_present
from service import schema_undone
from service.schema_check import lacks_privilege, refuse_missing, refuse_undone, service_tables
from service.db_limits import bound_pool, bound_waits
from service.commands.quarantine import Quarantine, StuckCheck
from service.jobs.worker import Worker, utcnow

log = logging.getLogger(f"vmledger.{__name__}")


@dataclass(frozen=True)
class RebuildRunner:
    """Opens a projection runner over the database ``settings`` names, for a process of a
    parallel rebuild (picklable: ``projections.parallel_rebuild`` sends it to the child),
    and closes its pool afterwards. Creates no table: the parent process did."""

    settings: Settings

    @contextlib.contextmanager
    def __call__(self) -> Iterator[ProjectionRunner]:
        # a spawned child logs as the rebuild command does: errors only, one line each
        setup_command_logging()
        app = open_ledger(self.settings)
        try:
            yield ProjectionRunner(Database(app.recorder.datastore), app.recorder, app.mapper,
                                   read_models(app.mapper.transcoder, app))
        finally:
            app.close()


def open_ledger(settings: Settings) -> VmLedger:
    """The event store on the settings' database, every wait for it bounded from its first
    connection on (``bound_waits``; docs/jobs.md, "Outages"). It creates no table: the
    caller does, under a lock."""
    app = VmLedger(env={**settings.eventsourcing_env(), "CREATE_TABLE": "n"},
                   on_datastore=lambda datastore: bound_pool(datastore, settings))
    bound_waits(app, settings)
    return app


def _use_tables_made_by_another_role(app: VmLedger, db: Database) -> None:
    """Go on over the tables another role made, when none is missing and nothing the DDL
    would change is stale (raises ``PrivilegeError`` naming what is otherwise:
    ``refuse_missing``, ``refuse_undone``), with the event store's type adapters its
    ``create_table`` would have registered; one warning says the DDL was skipped."""
    tables = _service_tables(app, db)
    with db.transaction(commit=False) as tx:
        present = db.columns_of(tx, tables)
        refuse_missing(db, tx, [table for table in tables if not present[table]])
        # and nothing start-up's DDL would make or change is missing or stale: else a
        # process fails later, far from the cause (service/schema_undone.py)
        if refuse_undone(db, tx):
            log.warning("the database role may not run DDL: start-up made no table, index, "
                        "function or column (all there and current, made by their owner)")
    _register_type_adapters(app)


def _service_tables(app: VmLedger, db: Database) -> dict[str, Any]:
    """``service_tables`` under the names the event store gives its two tables."""
    return service_tables(db, app.recorder.events_table_name,  # type: ignore[attr-defined]
                          app.snapshots.recorder.events_table_name)  # type: ignore[union-attr]


def _register_type_adapters(app: VmLedger) -> None:
    """The event store's type adapters, which its ``create_table`` registers (PostgreSQL)."""
    register = getattr(app.recorder.datastore, "register_type_adapters", None)
    if register is not None:
        register()


def _make_tables(app: VmLedger, db: Database, makers: list[Any]) -> None:
    """Start-up's DDL: the event store's tables, then each of ``makers``' ``create_tables``
    (idempotent). PostgreSQL asks for CREATE on the schema (and a function's ownership)
    even where everything exists: a role that may only read or write rows (an auditor's)
    goes on over the tables their owner made, if none is missing."""
    try:
        app.recorder.create_table()
        app.snapshots.recorder.create_table()  # type: ignore[union-attr] - always on
        for maker in makers:
            maker.create_tables()
    except PersistenceError as error:
        if not lacks_privilege(error):
            raise
        _use_tables_made_by_another_role(app, db)


def _schema_current(app: VmLedger, db: Database, models: list[Any]) -> bool:
    """Whether every table the service makes is there with its columns, and (PostgreSQL)
    nothing else start-up's DDL would make or change is missing or stale
    (``schema_undone.undone``): read from the catalogue, which takes no lock on a table."""
    tables = _service_tables(app, db)
    with db.transaction(commit=False) as tx:
        present = db.columns_of(tx, tables)
        if any(not set(columns) <= present[table] for table, columns in tables.items()):
            return False
        return db.dialect is not Dialect.POSTGRES or not schema_undone.undone(db, tx, models)


def _server_status(servers: ServerQueries, fleet: SimulatedFleet, server_uuid: str
                   ) -> str | None:
    """A server's status for a DeleteVm: ``removed`` when an operator recorded its removal
    (``server_view``, as the worker and placement read it: one row by key, where a fold of the
    server's stream copies every claim it holds) or its compute node reports it gone (api.md,
    DeleteVm "its server was removed"), else what the node reports."""
    if servers.status(server_uuid) == "removed":
        return "removed"
    return fleet.server_status(server_uuid)


def _register_simulated_servers(commands: Commands, fleet: SimulatedFleet,
                                runner: ProjectionRunner) -> None:
    """Record each simulated compute node as a ``Server`` (once), and make them visible to
    placement at once. One read finds which are in the log already (a load of each was a few
    round trips): those are left as they are, even where the settings' RAM now differ; the
    others are registered through the change loop, which settles a race with another process
    registering them too."""
    servers = fleet.servers()
    present = select_present(commands.app.recorder, [UUID(s.uuid) for s in servers])
    registered = False
    for server in servers:
        if UUID(server.uuid) not in present:
            registered |= commands.register_server(
                server.uuid, hostname=server.hostname, boot_id=server.boot_id,
                ram_mib=server.ram_mib, cpus=server.cpus, cause=make_cause("simulator"))
    if registered:
        with contextlib.suppress(ProjectionConflictError):  # another process got there first
            # Not catch_up: it would publish every read model's lag from a process that may
            # run no runner, and that figure would never move again.
            runner.catch_up_models([runner.read_models["server_view"]])


@dataclass
class Services:
    """Everything one vmledger process uses, built from one ``Settings``."""

    settings: Settings
    app: VmLedger
    commands: Commands
    db: Database
    projections: ProjectionRunner
    vms: VmQueries
    jobs: JobQueries
    servers: ServerQueries
    fleet: SimulatedFleet
    worker: Worker
    agents: Agents
    quarantine: Quarantine
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _presence: ProjectorPresence | None = None

    @classmethod
    def build(cls, settings: Settings, *, register_fleet: bool = True,
              reads_only: bool = False) -> Services:
        """Connect to the configured database and create what is missing (idempotent). With
        ``register_fleet`` (a process that serves or works), the simulated compute nodes are
        made and each recorded as a ``Server`` once; without it (a command that only reads
        the log, or rebuilds read models) the log is left as it is: an auditor's command
        appends nothing. ``reads_only`` (``changes``, ``history``, ``audit verify``): no DDL
        runs where every table is there and current (``_schema_current``), since even a
        ``CREATE INDEX IF NOT EXISTS`` waits for every transaction writing to its table,
        and a reader started beside an open append failed on the lock timeout (a tester)."""
        app = open_ledger(settings)
        db = Database(app.recorder.datastore)
        runner = ProjectionRunner(
            db, app.recorder, app.mapper, read_models(app.mapper.transcoder, app),
            on_lag=report_projection_lag, rebuild_processes=settings.rebuild_processes,
            open_runner=RebuildRunner(settings),
        )
        fleet = SimulatedFleet(db, latency_s=settings.sim_latency_s)
        keys = IdempotencyStore(db, ttl_s=settings.idempotency_ttl_s)
        with db.schema_lock():
            if reads_only and _schema_current(app, db, list(runner.read_models.values())):
                _register_type_adapters(app)
            else:
                _make_tables(app, db, [runner, fleet, keys])
            if register_fleet:
                fleet.ensure_servers(settings.sim_servers, ram_mib=settings.sim_server_ram_mib,
                                     cpus=settings.sim_server_cpus)
        stuck = StuckCheck(StuckThresholds(settings.stuck_transient_s, settings.stuck_job_s),
                           utcnow)
        servers = ServerQueries(db)
        vms = VmQueries(db)
        commands = Commands(app, keys=keys, retries=settings.command_retries,
                            on_conflict=VERSION_CONFLICT_RETRIES.inc,
                            server_status=lambda uuid: _server_status(servers, fleet, uuid),
                            is_stuck=stuck,
                            after_save=[lambda _position: runner.wake()],
                            legacy_holders=vms.with_alias,
                            unique_aliases=settings.unique_aliases)
        jobs = JobQueries(db)
        if register_fleet:
            _register_simulated_servers(commands, fleet, runner)
        quarantine = Quarantine(commands, stuck)
        stuck_candidates = StuckCandidates(db)
        worker = Worker(
            commands,
            # the status as placement reads it (server_view): a job step asks before each
            # operation, and a fold of a server copies every claim it holds
            RecordedRemovalsRefused(fleet, servers.status),
            find_work=jobs.vms_with_unfinished_jobs,
            # a server the driver does not have (or removed since) is passed over when it
            # answers so (service/jobs/placing.py)
            placement=lambda vm: servers.candidates(vm.ram, vm.cpus),
            lease_s=settings.job_lease_s,
            paused=fleet.faults.workers_paused,
            step_attempts=settings.job_step_attempts,
            max_attempts=settings.job_max_attempts,
            periodic=lambda: [quarantine.quarantine_if_stuck(vm) for vm in stuck_candidates(
                stuck.clock(), stuck.thresholds)],
            periodic_s=settings.stuck_check_s,
        )
        runner.add_listener(worker.wake)
        return cls(settings=settings, app=app, commands=commands, db=db, projections=runner,
                   vms=vms, jobs=jobs, servers=servers, fleet=fleet, worker=worker,
                   agents=Agents(commands), quarantine=quarantine)

    @property
    def networks(self) -> NetworkQueries:
        """Queries of the networks (the ``network_view`` read model)."""
        return NetworkQueries(self.db)

    @property
    def volumes(self) -> VolumeQueries:
        """Queries of the volumes (the ``volume_mounts`` read model)."""
        return VolumeQueries(self.db)

    def hold_projector_lock(self) -> None:
        """Hold the lock that tells every process a projection runner runs on this database
        (``service.projector_presence``) until ``stop_background``: taken by ``vmledger
        project`` and by an embedded runner."""
        if self._presence is None:
            recorder = self.app.recorder
            self._presence = ProjectorPresence(
                self.settings, own_connection_params(recorder)
                if isinstance(recorder, PostgresLedgerRecorder) else None)
            self._presence.start()

    def projector_running(self) -> bool:
        """Whether a projection runner runs on this database, in this process or another.
        Raises what the database raises."""
        return self._presence is not None or projector_running(self.settings, self.db)

    def start_background(self, *, projections: bool = True, worker: bool = True) -> None:
        """Run the projection runner and/or the job worker in daemon threads."""
        if projections:
            self.hold_projector_lock()
            self._spawn("projections", lambda: self.projections.run_forever(
                self._stop, self.settings.projection_poll_s,
                # as ``vmledger project`` logs it: a pass failing every few ms is one line
                # every 10 s, not the log's whole volume
                on_error=Throttled(log, "projection pass failed")))
        if worker:
            self._spawn("worker", lambda: self.worker.run_forever(
                self._stop, self.settings.worker_poll_s))

    def _spawn(self, name: str, target: object) -> None:
        thread = threading.Thread(target=target, name=f"vmledger-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop_background(self, wait_s: float = 10.0) -> None:
        """Stop the background threads, waiting up to ``wait_s`` for each. A worker thread
        still running a job then is given up (a daemon, it dies with the process): the job
        keeps its lease until it expires and another worker takes it over, and the log says
        so, as ``vmledger work`` does when stopped with a job in hand."""
        self._stop.set()
        self.projections.wake()
        self.worker.wake()
        for thread in self._threads:
            thread.join(timeout=wait_s)
        if self._presence is not None:
            self._presence.stop()  # after the runner's thread: it ran until then
            self._presence = None
        if any(t.is_alive() and t.name == "vmledger-worker" for t in self._threads):
            self.worker.left_in_hand()

    def close(self) -> None:
        """Stop background threads, then close the database pool."""
        self.stop_background()
        self.commands.committer.close()
        self.app.close()
