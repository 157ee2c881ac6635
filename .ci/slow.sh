#!/usr/bin/env bash
# The long racing-process and fault runs: every test marked `slow` but the fault run
# (.ci/faults.sh runs that), which the README's `python -m pytest -q` leaves out (addopts in
# pyproject.toml). Called by .ci/run with its venv active and VMLEDGER_TEST_POSTGRES_URL and
# VMLEDGER_REQUIRE_POSTGRES set; prints the figures they measure (-rP). Exit status 5 (nothing
# collected) fails too.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q -rP -m 'slow and not faults'
