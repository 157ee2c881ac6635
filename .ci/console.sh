#!/usr/bin/env bash
# The console's browser tests (tests/browser/): Debian's Chromium driven by Playwright's Python
# package. Called by .ci/run from the clone's root with its virtualenv active. Installs
# chromium and chromium-driver with apt-get when missing (never a browser download: no
# `playwright install`), and fails, rather than skips, when something is still missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
    echo "console: installing Debian's chromium and chromium-driver"
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
/usr/bin/chromium --version

python -m pip install --quiet -e '.[test,browser]'

# The trace shard lives in shared/ beside the clone.
export VMLEDGER_TRACE="${VMLEDGER_TRACE:-$(cd .. && pwd)/shared/data/google2011_task_events_part-00000-of-00500.csv.gz}"
export VMLEDGER_REQUIRE_BROWSER=1
export VMLEDGER_CONSOLE_SCREENSHOTS="${VMLEDGER_CONSOLE_SCREENSHOTS:-$PWD/.ci-artifacts/console}"
python -m pytest -q tests/browser
echo "console: screenshots in $VMLEDGER_CONSOLE_SCREENSHOTS"
