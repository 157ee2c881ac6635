#!/usr/bin/env bash
# Triton's own changefeed Listener (npm `changefeed` 1.5.4, installed with --ignore-scripts into
# a temporary directory) against a vmledger started here on a free port: bootstrap, then a VM's
# create, stop and delete seen as changes (.ci/changefeed/listener.js). Run by .ci/run, from
# the clone's root with its virtualenv active.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

cp -r "$here/changefeed/." "$work/"
(cd "$work" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
    --cache "$work/.npm-cache" >/dev/null)

VMLEDGER_DATABASE_URL="sqlite:///$work/vmledger.db" VMLEDGER_LOG_FORMAT=text \
    vmledger serve --host 127.0.0.1 --port 0 >"$work/serve.log" 2>&1 &
server=$!
url=""
for _ in $(seq 100); do
    url="$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 || true)"
    [ -n "$url" ] && break
    sleep 0.2
done
if [ -z "$url" ]; then cat "$work/serve.log"; echo "vmledger did not start"; exit 1; fi
if ! node "$work/listener.js" "$url"; then
    tail -50 "$work/serve.log"
    exit 1
fi
