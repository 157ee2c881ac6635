"""What start-up's DDL would change in a PostgreSQL database whose tables exist: the work
``Services.build`` leaves undone when the role may not run DDL there (a role that may only
read and write rows: PostgreSQL asks for CREATE on the schema, and for ownership, even where
nothing would change).

Left undone on a database an older version made, a process fails later and far from the
cause: the projection runner cannot make a stale read model again (``mend_stale_tables``
drops it), the fleet meets a column it lacks, the runner claims batches with an older
``vmledger_claim``. So ``undone`` lists, in the order start-up would do it:

- the read models that have applied events and whose tables are missing or lack a column
  (``ProjectionRunner.create_tables``' stale check);
- the indexes the read models' statements declare that are missing;
- the claim function, missing or not the one this version defines (``CLAIM_FUNCTION_DDL``);
- the simulated fleet's columns an older table lacks (``simulated.ADDED_COLUMNS``), and an
  older ``sim_fences`` kept per VM, to be keyed per server (``fences.carry_per_vm_fences``).

Missing tables are ``schema_check.refuse_missing``'s; this module reads the catalogue only.
"""

from __future__ import annotations

import re

from projections.db import Database, Tx
from projections.read_model import ReadModel
from projections.tracking import CLAIM_FUNCTION_DDL, applied_read_models
from service.jobs.compute.fences import PER_VM_LACKS
from service.jobs.compute.simulated import ADDED_COLUMNS as FLEET_ADDED_COLUMNS

_INDEX = re.compile(r"CREATE (?:UNIQUE )?INDEX IF NOT EXISTS (?P<name>\w+) ON ")
# the function's body as PostgreSQL keeps it (pg_proc.prosrc): what lies between the $$
_CLAIM_BODY = CLAIM_FUNCTION_DDL.split("$$")[1]


def may_run_ddl(tx: Tx) -> bool:
    """Whether the role may create in the current schema and owns (or is a member of the
    role that owns) the tracking table, as ``Services.build``'s statements need; read in
    ``tx`` (PostgreSQL only)."""
    tx.execute("SELECT coalesce(has_schema_privilege(current_schema(), 'CREATE'), false) "
               "AS may_create, (SELECT pg_has_role(current_user, tableowner, 'USAGE') "
               "FROM pg_tables WHERE schemaname = current_schema() "
               "AND tablename = 'projection_tracking') AS owns")
    row = tx.fetchone()
    return bool(row and row["may_create"] and row["owns"] is not False)


def undone(db: Database, tx: Tx, read_models: list[ReadModel]) -> list[str]:
    """What start-up's DDL would change (see the module's list), each named in a few
    words; empty when everything is there and current. PostgreSQL only."""
    found: list[str] = []
    applied = applied_read_models(db, tx)
    for model in read_models:
        if model.name in applied:
            found += [f"{table} (stale)" for table in model.stale_tables(tx, db)]
    for model in read_models:
        for statement in model.create_statements(db):
            index = _INDEX.match(statement)
            if index is not None and not _exists(tx, index["name"]):
                found.append(f"index {index['name']} (missing)")
    tx.execute("SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
               "WHERE p.proname = 'vmledger_claim' AND n.nspname = current_schema()")
    claim = tx.fetchone()
    if claim is None:
        found.append("function vmledger_claim (missing)")
    elif claim["prosrc"] != _CLAIM_BODY:
        found.append("function vmledger_claim (an older version's)")
    for table, column, _kind in FLEET_ADDED_COLUMNS:
        if column not in db.columns(tx, table):
            found.append(f"{table}.{column} (missing)")
    fences = db.columns(tx, PER_VM_LACKS[0])
    if fences and PER_VM_LACKS[1] not in fences:
        found.append(f"{PER_VM_LACKS[0]} (per VM: to be keyed per server)")
    return found


def _exists(tx: Tx, name: str) -> bool:
    tx.execute("SELECT to_regclass(?) IS NOT NULL AS found", (name,))
    row = tx.fetchone()
    return bool(row and row["found"])
