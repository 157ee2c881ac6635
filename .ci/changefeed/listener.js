// Drives Triton's changefeed Listener (the npm package `changefeed` 1.5.4, unchanged) against
// a vmledger at process.argv[2]: it must bootstrap, then see a VM's create, stop and delete as
// changes of that VM with the right sub-resources. Exits 0 when all were seen, 1 otherwise.
'use strict';
var changefeed = require('changefeed');
var http = require('http');

var base = process.argv[2];
var quiet = function () {};
var log = {trace: quiet, debug: quiet, info: quiet, warn: quiet,
    error: function () { console.error.apply(console, arguments); }};
log.child = function () { return log; };

function call(method, path, body, cb) {
    var payload = body ? JSON.stringify(body) : null;
    var req = http.request(base + path, {method: method, headers: payload ?
        {'content-type': 'application/json', 'content-length': Buffer.byteLength(payload)} : {}},
        function (res) {
            var text = '';
            res.on('data', function (chunk) { text += chunk; });
            res.on('end', function () {
                if (res.statusCode >= 300) {
                    fail(method + ' ' + path + ': ' + res.statusCode + ' ' + text);
                }
                cb(text ? JSON.parse(text) : null);
            });
        });
    req.on('error', function (err) { fail(method + ' ' + path + ': ' + err); });
    if (payload) { req.write(payload); }
    req.end();
}

function fail(message) {
    console.error('changefeed check FAILED: ' + message);
    process.exit(1);
}

var vmUuid = null;
var changes = {};  // resource id -> [subResources of each change], in order
var waiting = null;  // {want: sub-resource, since: index, then: fn}
var lastPosition = 0;

function seenOf(uuid) { return changes[uuid] || []; }

// Calls then() once a change of the VM naming `want` arrived after the first `since` ones
// (counted before the request that causes it, which may arrive before its own answer).
function awaitChange(want, since, then) {
    waiting = {want: want, since: since, then: then};
    check();
}

function check() {
    if (!waiting) { return; }
    var seen = seenOf(vmUuid);
    for (var i = waiting.since; i < seen.length; i++) {
        if (seen[i].indexOf(waiting.want) !== -1) {
            var then = waiting.then;
            waiting = null;
            then();
            return;
        }
    }
}

function job(body, then) {
    call('GET', '/jobs/' + body.job_uuid + '/wait', null, function () { then(); });
}

var listener = changefeed.createListener({
    log: log, url: base, instance: 'e3f1f38e-5c5e-4d0b-9c5e-6d1f7a9b2c01',
    service: 'vmledger-ci',
    changeKind: {resource: 'vm', subResources: ['alias', 'customer_metadata', 'destroyed',
        'internal_metadata', 'nics', 'owner_uuid', 'server_uuid', 'state', 'tags']}
});
listener.on('error', function (err) { fail('listener error: ' + err); });
listener.on('bootstrap', function (bootstrap) {
    if (bootstrap.resource !== 'vm' || bootstrap.bootstrapRoute !== '/vms') {
        fail('unexpected bootstrap ' + JSON.stringify(bootstrap));
    }
    console.log('bootstrap: ' + JSON.stringify(bootstrap));
    call('POST', '/vms', {owner_uuid: '930896af-bf8c-48d4-885c-6573a94b1853',
        brand: 'joyent-minimal', ram: 256, alias: 'changefeed-check'}, function (created) {
        vmUuid = created.vm_uuid;
        job(created, function () {
            awaitChange('server_uuid', 1, function () {  // provisioned: placed and running
                var before = seenOf(vmUuid).length;
                call('POST', '/vms/' + vmUuid + '?action=stop', {}, function (stopping) {
                    job(stopping, function () {
                        awaitChange('state', before, function () {
                            before = seenOf(vmUuid).length;
                            call('DELETE', '/vms/' + vmUuid, null, function (deleting) {
                                job(deleting, function () {
                                    awaitChange('destroyed', before, done);
                                });
                            });
                        });
                    });
                });
            });
        });
    });
});
listener.on('readable', function () {
    var item;
    while ((item = listener.read()) !== null) {
        if (!item.changeKind || item.changeKind.resource !== 'vm' ||
            !Array.isArray(item.changeKind.subResources)) {
            fail('malformed change ' + JSON.stringify(item));
        }
        if (item.position <= lastPosition) {
            fail('change out of order: ' + item.position + ' after ' + lastPosition);
        }
        lastPosition = item.position;
        var id = item.changedResourceId;
        changes[id] = seenOf(id).concat([item.changeKind.subResources]);
        console.log('change of ' + id + ' at ' + item.position + ': ' +
            JSON.stringify(item.changeKind.subResources));
    }
    check();
});

function done() {
    var seen = seenOf(vmUuid);
    if (seen[0].indexOf('owner_uuid') === -1 || seen[0].indexOf('alias') === -1 ||
        seen[0].indexOf('state') === -1) {
        fail('the create did not name owner_uuid, alias and state: ' + JSON.stringify(seen[0]));
    }
    console.log('changefeed check passed: bootstrap, then create, stop and delete of ' + vmUuid +
        ' seen as ' + seen.length + ' changes');
    listener.close();
    process.exit(0);
}

setTimeout(function () { fail('timed out; changes seen: ' + JSON.stringify(changes)); }, 60000);
listener.register();
