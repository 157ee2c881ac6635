/*
 * Drives a running vmledger with Triton's published VMAPI client (sdc-clients, `VMAPI` class,
 * used unchanged) and checks every answer. Run by tests/integration/test_vmapi_client.py.
 *
 *   VMAPI_CLIENT_MODULES=/path/to/node_modules VMLEDGER_PORT=8080 node drive.js
 *
 * Prints one "ok ..." line per checked step; on the first wrong result prints "FAIL ..." and
 * exits 1.
 *
 * Name resolution (the only shim; request bytes are untouched):
 * - The client talks to http://vmapi.vmledger.test:PORT. `dns.lookup` answers 127.0.0.1 for
 *   every *.vmledger.test name.
 * - createVmAndWait finds the job service by host name: vmapi.X -> http://workflow.X, on port
 *   80. (It means to read the `workflow-api` response header first, but it passes the request
 *   object where the response belongs, so the header is never seen: see `createVmAndWait` in
 *   sdc-clients/lib/vmapi.js.) Connections to workflow.vmledger.test:80 are sent to the test
 *   server's port instead; the Host header stays `workflow.vmledger.test`, as in a deployment
 *   that serves the same app under both names.
 */

'use strict';

var assert = require('assert');
var crypto = require('crypto');
var dns = require('dns');
var http = require('http');
var path = require('path');

var MODULES = process.env.VMAPI_CLIENT_MODULES;
var PORT = Number(process.env.VMLEDGER_PORT);
if (!MODULES || !PORT) {
    console.error('usage: VMAPI_CLIENT_MODULES=<node_modules> VMLEDGER_PORT=<port> node drive.js');
    process.exit(2);
}
var PAGED_VMS = Number(process.env.PAGED_VMS || 1005);  // > 1000: the server's page size

var VMAPI = require(path.join(MODULES, 'sdc-clients')).VMAPI;
var bunyan = require(path.join(MODULES, 'bunyan'));

var DOMAIN = 'vmledger.test';
var VMAPI_HOST = 'vmapi.' + DOMAIN;
var WORKFLOW_HOST = 'workflow.' + DOMAIN;
var UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;


// --- the resolver shim, and a record of what went over the wire

var realLookup = dns.lookup;
dns.lookup = function lookup(hostname, options, callback) {
    if (typeof (options) === 'function') {
        callback = options;
        options = {};
    }
    if (typeof (hostname) === 'string' && hostname.endsWith('.' + DOMAIN)) {
        if (options && options.all) {
            return process.nextTick(callback, null, [{address: '127.0.0.1', family: 4}]);
        }
        return process.nextTick(callback, null, '127.0.0.1', 4);
    }
    return realLookup.call(dns, hostname, options, callback);
};

var connections = [];  // {host, port, connected_port}
var realCreateConnection = http.Agent.prototype.createConnection;
http.Agent.prototype.createConnection = function createConnection(options, callback) {
    var target = options;
    if (options.host === WORKFLOW_HOST && Number(options.port) === 80) {
        target = Object.assign({}, options, {port: PORT});
    }
    connections.push({host: options.host, port: Number(options.port),
        connected_port: Number(target.port)});
    return realCreateConnection.call(this, target, callback);
};

var requests = [];  // {host, port, method, path, head (the request head as sent)}
var realRequest = http.request;
http.request = function request(options) {
    var req = realRequest.apply(http, arguments);
    var entry = {host: options.hostname || options.host, port: Number(options.port || 80),
        method: options.method, path: options.path, head: null};
    requests.push(entry);
    req.once('finish', function () { entry.head = req._header; });
    return req;
};


// --- small helpers

var log = bunyan.createLogger({name: 'drive', level: 'fatal'});
var client = new VMAPI({url: 'http://' + VMAPI_HOST + ':' + PORT, log: log});

function call(fn) {
    // The client's callbacks: (err, obj, req, res), or (err, value) for countVms/createVmAndWait.
    return new Promise(function (resolve) {
        fn(function (err, obj, req, res) {
            resolve({err: err, obj: obj, req: req, res: res});
        });
    });
}

function expect(condition, message, detail) {
    if (!condition) {
        var text = message;
        if (detail !== undefined) {
            text += '\n    got: ' + JSON.stringify(detail, null, 1).slice(0, 2000);
        }
        throw new Error(text);
    }
}

function ok(result, what) {
    expect(!result.err, what + ' failed: ' + (result.err && (result.err.name + ': ' +
        result.err.message)), result.err && result.err.body);
    return result.obj;
}

function refused(result, name, status, what) {
    expect(result.err, what + ' should fail with ' + name + ' but succeeded', result.obj);
    expect(result.err.name === name && result.err.statusCode === status,
        what + ' should fail with ' + name + ' (' + status + ') but failed with ' +
        result.err.name + ' (' + result.err.statusCode + ')', result.err.body);
}

function sleep(ms) {
    return new Promise(function (resolve) { setTimeout(resolve, ms); });
}

var TERMINAL = ['succeeded', 'failed', 'canceled'];

function checkJob(job, what) {
    // What the client relies on: a terminal job has chain results, and the last one's error is
    // empty exactly when the job succeeded (waitForJob pops it and judges by it alone).
    expect(job && UUID_RE.test(job.uuid), what + ': not a job object', job);
    if (TERMINAL.indexOf(job.execution) === -1) {
        return;
    }
    expect(Array.isArray(job.chain_results) && job.chain_results.length >= 1,
        what + ': a terminal job has no chain_results', job);
    var last = job.chain_results[job.chain_results.length - 1];
    expect(!last.error === (job.execution === 'succeeded'),
        what + ': the last chain result\'s error does not match execution ' + job.execution, job);
    expect(!job.error === (job.execution === 'succeeded'),
        what + ': job.error does not match execution ' + job.execution, job);
    job.chain_results.forEach(function (step) {
        expect(typeof (step.name) === 'string' && 'error' in step && 'result' in step,
            what + ': a chain result lacks name/result/error', step);
    });
}

async function getJob(uuid, what) {
    var job = ok(await call(function (cb) { client.getJob(uuid, cb); }), what + ': getJob');
    checkJob(job, what);
    return job;
}

async function waitJob(uuid, what) {
    var deadline = Date.now() + 30000;
    for (;;) {
        var job = await getJob(uuid, what);
        if (TERMINAL.indexOf(job.execution) !== -1) {
            return job;
        }
        expect(Date.now() < deadline, what + ': job ' + uuid + ' still ' + job.execution, job);
        await sleep(25);
    }
}

function checkAccepted(result, what) {
    var info = ok(result, what);
    expect(result.res.statusCode === 202, what + ': status ' + result.res.statusCode);
    expect(UUID_RE.test(info.vm_uuid) && UUID_RE.test(info.job_uuid),
        what + ': the answer is not {vm_uuid, job_uuid}', info);
    expect(typeof (result.res.headers['workflow-api']) === 'string',
        what + ': no workflow-api header', result.res.headers);
    return info;
}

async function actAndWait(method, params, what, expected) {
    var info = checkAccepted(await call(function (cb) { client[method](params, cb); }), what);
    expect(info.vm_uuid === params.uuid, what + ': vm_uuid is not the VM acted on', info);
    var job = await waitJob(info.job_uuid, what);
    expect(job.execution === (expected || 'succeeded'),
        what + ': job ended ' + job.execution + ', expected ' + (expected || 'succeeded'), job);
    expect(job.vm_uuid === params.uuid, what + ': job.vm_uuid', job);
    return job;
}

async function getVm(params, what) {
    return ok(await call(function (cb) { client.getVm(params, cb); }), what);
}

async function listVms(params, what) {
    var vms = ok(await call(function (cb) { client.listVms(params, cb); }), what);
    expect(Array.isArray(vms), what + ': not an array', vms);
    return vms;
}

async function countVms(params, what) {
    return ok(await call(function (cb) { client.countVms(params, cb); }), what);
}

function uuids(vms) {
    return vms.map(function (vm) { return vm.uuid; });
}

function sameSet(got, wanted, what) {
    var a = got.slice().sort();
    var b = wanted.slice().sort();
    expect(JSON.stringify(a) === JSON.stringify(b), what + ': expected ' + JSON.stringify(b),
        a);
}

function requestsTo(pathPrefix, since) {
    return requests.slice(since).filter(function (r) {
        return r.path.indexOf(pathPrefix) === 0;
    });
}


// --- the scenario

var OWNER = crypto.randomUUID();
var OTHER = crypto.randomUUID();
var PAGER = crypto.randomUUID();
var vm = {};       // name -> uuid
var jobsOf = {};   // vm uuid -> job uuids, oldest first

function noteJob(vmUuid, jobUuid) {
    (jobsOf[vmUuid] = jobsOf[vmUuid] || []).push(jobUuid);
}

var steps = [];
function step(name, fn) {
    steps.push({name: name, fn: fn});
}

step('ping answers', async function () {
    ok(await call(function (cb) { client.ping(cb); }), 'ping');
});

step('createVm (x-context kept in the job\'s params.context), then its job succeeds',
    async function () {
        var context = {caller: {type: 'operator', ip: '10.0.0.1'}, params: {step: 'web0'}};
        var result = await call(function (cb) {
            client.createVm({owner_uuid: OWNER, brand: 'joyent', ram: 256, alias: 'web0',
                context: context}, cb);
        });
        var info = checkAccepted(result, 'createVm');
        var sent = requests.filter(function (r) { return r.method === 'POST'; }).pop();
        expect(/\r\ncontent-md5: /i.test(sent.head) && /\r\nx-context: /i.test(sent.head),
            'createVm: the client did not send content-md5 and x-context', sent.head);
        vm.web0 = info.vm_uuid;
        noteJob(vm.web0, info.job_uuid);
        var job = await waitJob(info.job_uuid, 'createVm');
        expect(job.execution === 'succeeded' && job.name === 'provision' &&
            job.vm_uuid === vm.web0, 'createVm: provision job', job);
        assert.deepStrictEqual(job.params.context, context,
            'createVm: params.context is not the x-context sent');
    });

step('createVmAndWait: the wait helper polls http://workflow.<domain> (port 80, ' +
    'Connection: close) until the job succeeds', async function () {
    var before = requests.length;
    var context = {caller: {type: 'signature'}};
    var result = await call(function (cb) {
        client.createVmAndWait({owner_uuid: OWNER, brand: 'joyent', ram: 512, alias: 'web1',
            customer_metadata: {'user-script': '#!/bin/sh'}, tags: {role: 'web'},
            context: context}, cb);
    });
    var job = ok(result, 'createVmAndWait');
    checkJob(job, 'createVmAndWait');
    expect(job.execution === 'succeeded' && job.name === 'provision' &&
        UUID_RE.test(job.vm_uuid), 'createVmAndWait: the job it returned', job);
    assert.deepStrictEqual(job.params.context, context, 'createVmAndWait: params.context');
    vm.web1 = job.vm_uuid;
    noteJob(vm.web1, job.uuid);
    var polls = requestsTo('/jobs/' + job.uuid, before);
    expect(polls.length >= 1 && polls.every(function (r) {
        return r.host === WORKFLOW_HOST && r.port === 80 &&
            /\r\nhost: workflow\.vmledger\.test\r\n/i.test(r.head) &&
            /\r\nconnection: close\r\n/i.test(r.head);
    }), 'createVmAndWait: expected polls of workflow.vmledger.test:80 with Connection: close',
    polls);
});

step('createVm with sync=true answers once the provision has ended', async function () {
    var before = requests.length;
    var info = checkAccepted(await call(function (cb) {
        client.createVm({payload: {owner_uuid: OWNER, brand: 'kvm', ram: 1024, alias: 'web2'},
            sync: true}, cb);
    }), 'createVm sync');
    expect(requestsTo('/vms?sync=true', before).length === 1, 'createVm: sync=true not sent',
        requests.slice(before));
    vm.web2 = info.vm_uuid;
    noteJob(vm.web2, info.job_uuid);
    var job = await getJob(info.job_uuid, 'createVm sync');
    expect(job.execution === 'succeeded', 'createVm sync: job not ended when answered', job);
});

step('getVm returns the VM object', async function () {
    var web1 = await getVm({uuid: vm.web1}, 'getVm');
    expect(web1.uuid === vm.web1 && web1.owner_uuid === OWNER && web1.alias === 'web1' &&
        web1.brand === 'joyent' && web1.ram === 512 && web1.state === 'running' &&
        UUID_RE.test(web1.server_uuid) && web1.tags.role === 'web' &&
        web1.customer_metadata['user-script'] === '#!/bin/sh' &&
        typeof (web1.create_timestamp) === 'string', 'getVm: wrong VM object', web1);
    var mine = await getVm({uuid: vm.web1, owner_uuid: OWNER}, 'getVm with its owner_uuid');
    expect(mine.uuid === vm.web1, 'getVm with its owner_uuid', mine);
});

step('getVm with another owner_uuid, or of no VM, is ResourceNotFoundError', async function () {
    refused(await call(function (cb) { client.getVm({uuid: vm.web1, owner_uuid: OTHER}, cb); }),
        'ResourceNotFoundError', 404, 'getVm with a mismatching owner_uuid');
    refused(await call(function (cb) { client.getVm({uuid: crypto.randomUUID()}, cb); }),
        'ResourceNotFoundError', 404, 'getVm of no VM');
});

step('an x-request-id sent is answered back', async function () {
    var id = crypto.randomUUID();
    var result = await call(function (cb) {
        client.getVm({uuid: vm.web0}, {headers: {'x-request-id': id}}, cb);
    });
    ok(result, 'getVm with x-request-id');
    expect(result.res.headers['x-request-id'] === id, 'x-request-id not echoed',
        result.res.headers);
});

step('stopVm with owner_uuid, origin, creator_uuid, timeout and context', async function () {
    var context = {caller: {type: 'operator'}};
    var job = await actAndWait('stopVm', {uuid: vm.web1, owner_uuid: OWNER, origin: 'adminui',
        creator_uuid: OWNER, timeout: 30, context: context}, 'stopVm');
    noteJob(vm.web1, job.uuid);
    expect(job.name === 'stop', 'stopVm: job name', job);
    assert.deepStrictEqual(job.params.context, context, 'stopVm: params.context');
    var web1 = await getVm({uuid: vm.web1}, 'getVm after stop');
    expect(web1.state === 'stopped', 'stopVm: VM not stopped', web1);
});

step('stopVm of a stopped VM: a job that fails (API v1), unless idempotent=true',
    async function () {
        var failed = await actAndWait('stopVm', {uuid: vm.web1}, 'stopVm again', 'failed');
        noteJob(vm.web1, failed.uuid);
        var last = failed.chain_results[failed.chain_results.length - 1];
        expect(/stop/i.test(JSON.stringify(last.error)), 'stopVm again: the error', failed);
        var job = await actAndWait('stopVm', {uuid: vm.web1, idempotent: true},
            'stopVm idempotent');
        noteJob(vm.web1, job.uuid);
    });

step('an action with another owner_uuid is ResourceNotFoundError', async function () {
    refused(await call(function (cb) {
        client.startVm({uuid: vm.web1, owner_uuid: OTHER}, cb);
    }), 'ResourceNotFoundError', 404, 'startVm with a mismatching owner_uuid');
});

step('startVm with idempotent=true and sync=true answers once the job has ended',
    async function () {
        var info = checkAccepted(await call(function (cb) {
            client.startVm({uuid: vm.web1, idempotent: true, sync: true}, cb);
        }), 'startVm');
        noteJob(vm.web1, info.job_uuid);
        var job = await getJob(info.job_uuid, 'startVm');
        expect(job.execution === 'succeeded' && job.name === 'start',
            'startVm sync: job not succeeded when answered', job);
        var web1 = await getVm({uuid: vm.web1}, 'getVm after start');
        expect(web1.state === 'running', 'startVm: VM not running', web1);
    });

step('rebootVm with idempotent=true', async function () {
    var job = await actAndWait('rebootVm', {uuid: vm.web1, idempotent: true}, 'rebootVm');
    noteJob(vm.web1, job.uuid);
    expect(job.name === 'reboot', 'rebootVm: job name', job);
    expect((await getVm({uuid: vm.web1}, 'getVm')).state === 'running',
        'rebootVm: VM not running');
});

step('killVm (a forced stop), with and without signal SIGKILL', async function () {
    var job = await actAndWait('killVm', {uuid: vm.web1}, 'killVm');
    noteJob(vm.web1, job.uuid);
    expect((await getVm({uuid: vm.web1}, 'getVm')).state === 'stopped',
        'killVm: VM not stopped');
    job = await actAndWait('killVm', {uuid: vm.web2, signal: 'SIGKILL'}, 'killVm SIGKILL');
    noteJob(vm.web2, job.uuid);
    expect((await getVm({uuid: vm.web2}, 'getVm')).state === 'stopped',
        'killVm SIGKILL: VM not stopped');
    job = await actAndWait('startVm', {uuid: vm.web1}, 'startVm after kill');
    noteJob(vm.web1, job.uuid);
});

step('updateVm: alias, customer_metadata, tags', async function () {
    var context = {caller: {type: 'signature'}};
    var job = await actAndWait('updateVm', {uuid: vm.web1, owner_uuid: OWNER, context: context,
        payload: {alias: 'web1-renamed', customer_metadata: {motd: 'hi'},
            tags: {role: 'web', tier: 2}}}, 'updateVm');
    noteJob(vm.web1, job.uuid);
    expect(job.name === 'update', 'updateVm: job name', job);
    assert.deepStrictEqual(job.params.context, context, 'updateVm: params.context');
    var web1 = await getVm({uuid: vm.web1}, 'getVm after update');
    expect(web1.alias === 'web1-renamed' && web1.customer_metadata.motd === 'hi' &&
        web1.tags.tier === 2 && web1.state === 'running', 'updateVm: VM not updated', web1);
});

step('a failed provision (force_provision_failure) is a failed job', async function () {
    var result = await call(function (cb) {
        client.createVmAndWait({owner_uuid: OWNER, brand: 'joyent', ram: 256, alias: 'broken',
            internal_metadata: {force_provision_failure: true}}, cb);
    });
    expect(result.err && result.err.message,
        'createVmAndWait of a failing provision did not fail', result.obj);
    var found = await listVms({owner_uuid: OWNER, alias: 'broken'}, 'listVms alias=broken');
    expect(found.length === 1, 'listVms alias=broken', found);
    vm.broken = found[0].uuid;
    var jobs = ok(await call(function (cb) {
        client.listJobs({vm_uuid: vm.broken, task: 'provision'}, cb);
    }), 'listJobs of the broken VM');
    expect(jobs.length === 1, 'listJobs of the broken VM', jobs);
    var job = await getJob(jobs[0].uuid, 'failed provision');
    noteJob(vm.broken, job.uuid);
    var last = job.chain_results[job.chain_results.length - 1];
    expect(job.execution === 'failed' && last.error, 'failed provision: job', job);
    // waitForJob's message is the last chain result's error.message, else its JSON
    var message = last.error.message || JSON.stringify(last.error);
    expect(result.err.message === message, 'createVmAndWait error "' + result.err.message +
        '" is not the last chain result\'s error ' + message);
    expect((await getVm({uuid: vm.broken}, 'getVm broken')).state === 'failed',
        'the VM of a failed provision is not failed');
});

step('listVms and countVms with filters (owner_uuid, state), limit and offset',
    async function () {
        var all = await listVms({owner_uuid: OWNER}, 'listVms owner_uuid');
        sameSet(uuids(all), [vm.web0, vm.web1, vm.web2, vm.broken], 'listVms owner_uuid');
        expect(all.every(function (v) { return v.owner_uuid === OWNER; }),
            'listVms owner_uuid: another owner\'s VM', all);
        var order = uuids(all);
        expect(order[0] === vm.web0 && order[3] === vm.broken,
            'listVms: not in creation order', order);
        sameSet(uuids(await listVms({owner_uuid: OWNER, state: 'running'}, 'listVms running')),
            [vm.web0, vm.web1], 'listVms owner_uuid+state=running');
        sameSet(uuids(await listVms({owner_uuid: OWNER, state: 'stopped'}, 'listVms stopped')),
            [vm.web2], 'listVms owner_uuid+state=stopped');
        sameSet(uuids(await listVms({owner_uuid: OWNER, state: 'failed'}, 'listVms failed')),
            [vm.broken], 'listVms owner_uuid+state=failed');
        expect((await listVms({owner_uuid: OTHER}, 'listVms other owner')).length === 0,
            'listVms of an owner with no VMs is not empty');
        var page = await listVms({owner_uuid: OWNER, limit: 2, offset: 1}, 'listVms page');
        assert.deepStrictEqual(uuids(page), order.slice(1, 3), 'listVms limit=2&offset=1');
        expect(await countVms({owner_uuid: OWNER}, 'countVms') === 4, 'countVms owner_uuid');
        expect(await countVms({owner_uuid: OWNER, state: 'running'}, 'countVms running') === 2,
            'countVms owner_uuid+state=running');
        expect(await countVms({owner_uuid: OTHER}, 'countVms other') === 0, 'countVms other');
    });

step('listVms with tag.K and fields= filters (VMAPI\'s ListVms parameters)',
    async function () {
        sameSet(uuids(await listVms({owner_uuid: OWNER, 'tag.role': 'web'}, 'listVms tag.role')),
            [vm.web1], 'listVms tag.role=web');
        sameSet(uuids(await listVms({owner_uuid: OWNER, 'tag.role': 'web', 'tag.tier': '2'},
            'listVms tag.role+tag.tier')), [vm.web1], 'listVms tag.role=web&tag.tier=2');
        expect((await listVms({owner_uuid: OWNER, 'tag.role': 'db'}, 'listVms tag.role=db'))
            .length === 0, 'listVms tag.role=db is not empty');
        var slim = await listVms({owner_uuid: OWNER, fields: 'uuid,alias,state'},
            'listVms fields');
        expect(slim.length === 4 && slim.every(function (v) {
            return JSON.stringify(Object.keys(v).sort()) === '["alias","state","uuid"]';
        }), 'listVms fields=uuid,alias,state: other fields came back', slim);
        refused(await call(function (cb) {
            client.listVms({owner_uuid: OWNER, fields: 'uuid,colour'}, cb);
        }), 'ValidationFailedError', 409, 'listVms fields=uuid,colour');
    });

step('a client constructed with version ~9 (VMAPI\'s own line) is served version 1',
    async function () {
        var nine = new VMAPI({url: 'http://' + VMAPI_HOST + ':' + PORT, log: log,
            version: '~9'});
        var before = requests.length;
        var result = await call(function (cb) { nine.getVm({uuid: vm.web2}, cb); });
        ok(result, 'getVm with version ~9');
        var sent = requests.slice(before).pop();
        expect(/\r\naccept-version: ~9\r\n/i.test(sent.head),
            'the client did not send Accept-Version: ~9', sent.head);
        expect(result.res.headers['api-version'] === '1.0.0', 'version ~9 was not served 1.0.0',
            result.res.headers);
        // version 1's behaviour: stopping a stopped VM (web2, killed above) is a job that fails
        expect(result.obj.state === 'stopped', 'web2 is not stopped', result.obj);
        var info = checkAccepted(await call(function (cb) {
            nine.stopVm({uuid: vm.web2}, cb);
        }), 'stopVm of a stopped VM (~9)');
        expect((await waitJob(info.job_uuid, 'stopVm (~9)')).execution === 'failed',
            'version ~9: stopping a stopped VM did not fail as in version 1');
        nine.close();
    });

function postNetwork(body) {
    return new Promise(function (resolve, reject) {
        var data = JSON.stringify(body);
        var req = http.request({host: '127.0.0.1', port: PORT, method: 'POST', path: '/networks',
            headers: {'content-type': 'application/json', 'content-length': data.length}},
        function (res) {
            var chunks = [];
            res.on('data', function (c) { chunks.push(c); });
            res.on('end', function () {
                resolve({status: res.statusCode, body: JSON.parse(Buffer.concat(chunks))});
            });
        });
        req.on('error', reject);
        req.end(data);
    });
}

var NET_OWNER = crypto.randomUUID();

step('createVm with networks (a uuid, {uuid, primary}, {name, ip}) and origin gives NICs',
    async function () {
        var made = await postNetwork({name: 'external', subnet: '10.77.0.0/24',
            provision_start_ip: '10.77.0.10', provision_end_ip: '10.77.0.250',
            gateway: '10.77.0.1'});
        expect(made.status === 201, 'POST /networks', made);
        vm.network = made.body.uuid;
        var info = checkAccepted(await call(function (cb) {
            client.createVm({owner_uuid: NET_OWNER, brand: 'joyent', ram: 256, alias: 'net0',
                origin: 'cloudapi', networks: [vm.network, {uuid: vm.network, primary: true},
                    {name: 'external', ip: '10.77.0.99'}]}, cb);
        }), 'createVm with networks');
        vm.net0 = info.vm_uuid;
        expect((await waitJob(info.job_uuid, 'createVm with networks')).execution ===
            'succeeded', 'createVm with networks: provision');
        var net0 = await getVm({uuid: vm.net0}, 'getVm with nics');
        var ips = net0.nics.map(function (n) { return n.ip; });
        assert.deepStrictEqual(ips, ['10.77.0.10', '10.77.0.11', '10.77.0.99'],
            'createVm with networks: addresses');
        assert.deepStrictEqual(net0.nics.map(function (n) { return n.primary; }),
            [false, true, false], 'createVm with networks: the primary NIC');
        expect(net0.nics.every(function (n) {
            return n.network_uuid === vm.network && n.netmask === '255.255.255.0' &&
                n.gateway === '10.77.0.1' && /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(n.mac);
        }), 'createVm with networks: NIC objects', net0.nics);
    });

step('addNics and removeNics: jobs, and the VM\'s NICs after them', async function () {
    var job = await actAndWait('addNics', {uuid: vm.net0, networks: [{uuid: vm.network}]},
        'addNics');
    expect(job.name === 'add_nics', 'addNics: job name', job);
    var nics = (await getVm({uuid: vm.net0}, 'getVm after addNics')).nics;
    expect(nics.length === 4 && nics[3].ip === '10.77.0.12', 'addNics: the new NIC', nics);
    job = await actAndWait('removeNics', {uuid: vm.net0, macs: [nics[1].mac, nics[3].mac]},
        'removeNics');
    expect(job.name === 'remove_nics', 'removeNics: job name', job);
    var left = (await getVm({uuid: vm.net0}, 'getVm after removeNics')).nics;
    assert.deepStrictEqual(left.map(function (n) { return n.ip; }), ['10.77.0.10', '10.77.0.99'],
        'removeNics: the NICs left');
    expect(left[0].primary && !left[1].primary, 'removeNics: a primary NIC is left', left);
    job = await actAndWait('deleteVm', {uuid: vm.net0}, 'deleteVm with NICs');
    var again = checkAccepted(await call(function (cb) {
        client.createVm({owner_uuid: NET_OWNER, brand: 'joyent', ram: 256,
            networks: [{uuid: vm.network, ip: '10.77.0.99'}]}, cb);
    }), 'createVm on an address given back');
    expect((await waitJob(again.job_uuid, 'createVm on an address given back')).execution ===
        'succeeded', 'the address of a destroyed VM was not given back');
});

step('deleteVm: another owner_uuid is ResourceNotFoundError; a destroy job; sync=true',
    async function () {
        refused(await call(function (cb) {
            client.deleteVm({uuid: vm.web0, owner_uuid: OTHER}, cb);
        }), 'ResourceNotFoundError', 404, 'deleteVm with a mismatching owner_uuid');
        var context = {caller: {type: 'operator'}};
        var job = await actAndWait('deleteVm', {uuid: vm.web0, owner_uuid: OWNER,
            context: context}, 'deleteVm');
        noteJob(vm.web0, job.uuid);
        expect(job.name === 'destroy', 'deleteVm: job name', job);
        assert.deepStrictEqual(job.params.context, context, 'deleteVm: params.context');
        var web0 = await getVm({uuid: vm.web0}, 'getVm destroyed');
        expect(web0.state === 'destroyed', 'deleteVm: VM not destroyed', web0);
        var info = checkAccepted(await call(function (cb) {
            client.deleteVm({uuid: vm.web2, sync: true}, cb);
        }), 'deleteVm sync');
        noteJob(vm.web2, info.job_uuid);
        job = await getJob(info.job_uuid, 'deleteVm sync');
        expect(job.execution === 'succeeded', 'deleteVm sync: job not ended when answered', job);
        job = await actAndWait('deleteVm', {uuid: vm.web0}, 'deleteVm of a destroyed VM (v1)');
        noteJob(vm.web0, job.uuid);
        refused(await call(function (cb) { client.startVm({uuid: vm.web0}, cb); }),
            'InvalidTransitionError', 409, 'startVm of a destroyed VM');
    });

step('listJobs (by vm_uuid, execution, task) and getJob', async function () {
    var jobs = ok(await call(function (cb) { client.listJobs({vm_uuid: vm.web1}, cb); }),
        'listJobs vm_uuid');
    jobs.forEach(function (j) { checkJob(j, 'listJobs'); });
    assert.deepStrictEqual(jobs.map(function (j) { return j.uuid; }),
        jobsOf[vm.web1].slice().reverse(), 'listJobs vm_uuid: not the VM\'s jobs, newest first');
    var failed = ok(await call(function (cb) {
        client.listJobs({vm_uuid: vm.web1, execution: 'failed'}, cb);
    }), 'listJobs execution=failed');
    expect(failed.length === 1 && failed[0].name === 'stop' && failed[0].execution === 'failed',
        'listJobs execution=failed', failed);
    var stops = ok(await call(function (cb) {
        client.listJobs({vm_uuid: vm.web1, task: 'stop'}, cb);
    }), 'listJobs task=stop');
    expect(stops.length === 3 && stops.every(function (j) { return j.name === 'stop'; }),
        'listJobs task=stop (stop, stop, stop idempotent: not the kill, as in VMAPI)', stops);
    var kills = ok(await call(function (cb) {
        client.listJobs({vm_uuid: vm.web1, task: 'kill'}, cb);
    }), 'listJobs task=kill');
    expect(kills.length === 1 && kills[0].name === 'stop',
        'listJobs task=kill (the stop job the kill queued)', kills);
    var everyJob = ok(await call(function (cb) { client.listJobs(cb); }), 'listJobs');
    everyJob.forEach(function (j) { checkJob(j, 'listJobs'); });
    var mine = [].concat.apply([], Object.keys(jobsOf).map(function (k) { return jobsOf[k]; }));
    sameSet(uuids(everyJob).filter(function (u) { return mine.indexOf(u) !== -1; }), mine,
        'listJobs: every job');
    var job = await getJob(jobsOf[vm.web1][0], 'getJob');
    expect(job.name === 'provision' && job.vm_uuid === vm.web1 && job.execution ===
        'succeeded', 'getJob', job);
    refused(await call(function (cb) { client.getJob(crypto.randomUUID(), cb); }),
        'ResourceNotFoundError', 404, 'getJob of no job');
});

step('listVms pages by offset past the 1000-VM page; countVms agrees', async function () {
    var created = [];
    var next = 0;
    async function creator() {
        while (next < PAGED_VMS) {
            next++;
            var info = checkAccepted(await call(function (cb) {
                client.createVm({owner_uuid: PAGER, brand: 'joyent', ram: 128}, cb);
            }), 'createVm for paging');
            created.push(info.vm_uuid);
        }
    }
    await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map(creator));
    var before = requests.length;
    var listed = await listVms({owner_uuid: PAGER}, 'listVms paged');
    expect(listed.length === PAGED_VMS && new Set(uuids(listed)).size === PAGED_VMS,
        'listVms paged: ' + listed.length + ' VMs (' + new Set(uuids(listed)).size +
        ' distinct), expected ' + PAGED_VMS);
    sameSet(uuids(listed), created, 'listVms paged');
    var pages = requestsTo('/vms?', before).map(function (r) { return r.path; });
    expect(pages.length === 2 && /offset=0/.test(pages[0]) &&
        /offset=1000&limit=1000/.test(pages[1]), 'listVms paged: expected two pages', pages);
    expect(await countVms({owner_uuid: PAGER}, 'countVms paged') === PAGED_VMS,
        'countVms paged');
    var total = await countVms({}, 'countVms all');
    var everything = await listVms({}, 'listVms all');
    expect(everything.length === total && new Set(uuids(everything)).size === total,
        'listVms of all: ' + everything.length + ' VMs, countVms says ' + total);
});

step('keep-alive: the client reused its connections to vmapi', async function () {
    var toVmapi = requests.filter(function (r) { return r.host === VMAPI_HOST; });
    var opened = connections.filter(function (c) { return c.host === VMAPI_HOST; });
    expect(toVmapi.every(function (r) { return /\r\nconnection: keep-alive\r\n/i.test(r.head); }),
        'requests to vmapi were not keep-alive');
    expect(opened.length * 10 < toVmapi.length, opened.length + ' connections for ' +
        toVmapi.length + ' requests: keep-alive not served');
});

async function main() {
    var watchdog = setTimeout(function () {
        console.log('FAIL: the scenario took more than 130 s');
        process.exit(1);
    }, 130000);
    for (var i = 0; i < steps.length; i++) {
        var started = Date.now();
        try {
            await steps[i].fn();
        } catch (error) {
            console.log('FAIL ' + steps[i].name + '\n  ' + (error.stack || error));
            process.exit(1);
        }
        console.log('ok ' + (i + 1) + ' - ' + steps[i].name + ' (' + (Date.now() - started) +
            ' ms)');
    }
    clearTimeout(watchdog);
    console.log('all ' + steps.length + ' steps passed: ' + requests.length + ' requests, ' +
        connections.length + ' connections');
    client.close();
    process.exit(0);
}

main();
