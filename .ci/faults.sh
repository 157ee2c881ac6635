#!/usr/bin/env bash
# The fault run (docs/jobs.md, "The fault run"): kill -9 of job workers at random and right
# after each kind of compute effect, and database outages through a TCP proxy, on PostgreSQL.
# Called by .ci/run with its venv active and VMLEDGER_TEST_POSTGRES_URL set; prints the
# figures (-rP shows the passed tests' output).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q -rP -m slow tests/integration/test_fault_run.py
