#!/usr/bin/env bash
# Triton's own VMAPI tests (../shared/peer/sdc-vmapi, the upstream files unmodified) against
# vmledger: each pass starts `vmledger serve` (the .ci venv's, on its embedded defaults) in an
# empty temp dir on a free loopback port, runs the harness's run.sh, and stops the server.
# Fails if any test fails. Called by .ci/run from the clone's root with its venv active.
#
# Two passes, each on a fresh server (docs/vmapi-compatibility.md, "Triton's own tests"):
# vms.delete_non_existing_no_workflow leaves a VM that no API call may remove (PutVm made it
# with server_uuid null, and DeleteVm of such a VM is 409, as on VMAPI, whose test then
# deletes the VM's Moray row behind the API's back). A later group's "delete the leftover
# test-- VMs" would meet it, so that group runs on a server of its own.
# PEER_NO_KEEPALIVE=1 pins the Node 6 HTTP agent upstream wrote the curl-head tests for (the
# harness's README): under Node 20's keep-alive agent their *_default_request cases send
# exactly what the *_keepalive_request cases send but expect the opposite answer.
set -euo pipefail
clone=$(cd "$(dirname "$0")/.." && pwd)
shared="${VMLEDGER_SHARED:-$(dirname "$clone")/shared}"  # .ci/run finds it
peer="$shared/peer/sdc-vmapi"
[ -f "$peer/run.sh" ] || { echo "vmapi-peer: no harness at $peer" >&2; exit 1; }
command -v vmledger > /dev/null || { echo "vmapi-peer: vmledger is not installed" >&2; exit 1; }

work=$(mktemp -d)
server_pid=""
stop_server() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2> /dev/null; then
        kill -TERM "$server_pid"
        wait "$server_pid" || true
    fi
    server_pid=""
}
trap 'stop_server; rm -rf "$work"' EXIT

free_port() {
    python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_server() {  # $1: the pass's name
    local dir="$work/$1" port
    mkdir -p "$dir"
    port=$(free_port)
    (cd "$dir" && exec vmledger serve --host 127.0.0.1 --port "$port" > serve.log 2>&1) &
    server_pid=$!
    for _ in $(seq 100); do
        if curl -fs -o /dev/null "http://127.0.0.1:$port/ping"; then
            url="http://127.0.0.1:$port"
            return 0
        fi
        kill -0 "$server_pid" 2> /dev/null || break
        sleep 0.2
    done
    echo "vmapi-peer: vmledger serve did not answer; its log:" >&2
    cat "$dir/serve.log" >&2
    exit 1
}

status=0
run_pass() {  # $1: the pass's name, $2: run.sh's --only list
    start_server "$1"
    echo "== vmapi-peer pass '$1' against $url"
    PEER_NO_KEEPALIVE=1 bash "$peer/run.sh" "$url" --only "$2" --json "$work/$1.json" \
        || status=1
    stop_server
}

run_pass main "vms.list-sort.test.js,vms.curl-head-requests.test.js,vms.list.test.js,\
vms.marker.test.js,vms.list-filter-internal-metadata.test.js,vms.full.test.js"
run_pass null-server "vms.delete_non_existing_no_workflow.test.js"

python - "$work/main.json" "$work/null-server.json" <<'PY' || status=1
import json, sys
passed = failed = 0
for path in sys.argv[1:]:
    with open(path) as f:
        report = json.load(f)
    for group in report["files"]:
        print(f"  {group['name']}: {group['passed']} / {group['passed'] + group['failed']}")
    passed += report["totals"]["passed"]
    failed += report["totals"]["failed"]
print(f"vmapi-peer: {passed} passed, {failed} failed, in both passes")
sys.exit(1 if failed or passed != 97 else 0)
PY
exit $status
