'use strict';
// acquire, Lease, withSlot and giveBack against an in-process gRPC server
// of the native API.

const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { Client, D, withSlot, LeaseLostError, SlotRefusedError, RateLimitError, ratelimitV1: pb } = require('..');
const { startFake, okResponse, overResponse } = require('./helpers.js');

const expiresAt = new Date('2027-01-15T08:00:00.500Z');
const jobs = {
  code: pb.Code.CODE_OK,
  limit: { name: 'jobs', requests: 2, window: { seconds: 60, nanos: 0 }, algorithm: pb.Algorithm.ALGORITHM_CONCURRENCY },
  remaining: 1,
};
const admitted = (id = 'L1') => ({ code: pb.Code.CODE_OK, statuses: [jobs], lease: { id: Buffer.from(id), expiresAt } });
const busy = () => ({
  code: pb.Code.CODE_OVER_LIMIT,
  statuses: [{ ...jobs, code: pb.Code.CODE_OVER_LIMIT, remaining: 0, retryAfter: { seconds: 1, nanos: 0 } }],
});

/** leaseServer starts a fake answering the lease calls from the queues of answers. */
async function leaseServer(t, { acquire = [], release = [], renew = [] }, options = {}) {
  const next = (q, empty) => () => {
    const a = q.length ? q.shift() : empty;
    if (a instanceof Error) throw a;
    return a;
  };
  const fake = await startFake(() => okResponse(), {
    acquire: next(acquire, admitted()),
    release: next(release, {}),
    renew: next(renew, { code: pb.Code.CODE_OVER_LIMIT }),
  });
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000, logger: quiet(), ...options });
  t.after(() => client.close());
  return { fake, client };
}

/** quiet is a logger that records instead of printing. */
function quiet() {
  const lines = { warn: [], error: [] };
  return { lines, warn: (m) => lines.warn.push(m), error: (m) => lines.error.push(m) };
}

/** releases returns the lease ids of the Release requests fake received. */
function releases(fake) {
  return fake.requests.filter((_, i) => fake.methods[i] === 'release').map((r) => r.leaseId.toString());
}

test('acquire: a lease, released once, with the same descriptors', async (t) => {
  const { fake, client } = await leaseServer(t, {});
  const lease = await client.acquire('jobs', [{ ...D('job', 'export'), hits: 2 }]);
  assert.equal(lease.allowed, true);
  assert.equal(lease.decision.statuses[0].limit.algorithm, 'concurrency');
  assert.deepEqual(lease.expiresAt, expiresAt);
  await Promise.all([lease.release(), lease.release()]);
  await lease.release();
  const [acq, rel, ...rest] = fake.requests;
  assert.equal(rest.length, 0, 'one Release');
  assert.deepEqual(fake.methods, ['acquire', 'release']);
  assert.equal(rel.leaseId.toString(), 'L1');
  assert.equal(rel.domain, 'jobs');
  assert.deepEqual(rel.descriptors, acq.descriptors);
  assert.equal(acq.descriptors[0].hits, 2);
  assert.equal(lease.expiresAt, null);
  await assert.rejects(lease.renew(), LeaseLostError);
});

test('acquire: refused, or decided by the failure policy, holds nothing', async (t) => {
  const down = Object.assign(new Error('down'), { code: grpc.status.UNAVAILABLE, details: 'down' });
  const { fake, client } = await leaseServer(t, { acquire: [busy(), down] });
  const refused = await client.acquire('jobs', [D('job', 'export')]);
  assert.equal(refused.allowed, false);
  assert.equal(refused.decision.retryAfterMs, 1000);
  await refused.renew(); // nothing held: nothing asked
  await refused.release();
  const failed = await client.acquire('jobs', [D('job', 'export')]);
  assert.equal(failed.allowed, true);
  assert.equal(failed.decision.error.code, grpc.status.UNAVAILABLE);
  await failed.release();
  assert.deepEqual(fake.methods, ['acquire', 'acquire'], 'no Release, no Renew');
  assert.equal(client.failOpens, 1);
  assert.equal(client.localRefusals, 0);
});

test('renew: a new lease, which the release gives back; LeaseLostError once lapsed', async (t) => {
  const later = new Date(expiresAt.getTime() + 60000);
  const { fake, client } = await leaseServer(t, {
    acquire: [admitted('L1'), admitted('L3')],
    renew: [{ code: pb.Code.CODE_OK, lease: { id: Buffer.from('L2'), expiresAt: later } }, { code: pb.Code.CODE_OVER_LIMIT }],
  });
  const lease = await client.acquire('jobs', [D('job', 'export')]);
  await lease.renew();
  assert.deepEqual(lease.expiresAt, later);
  await lease.release();
  assert.deepEqual(fake.methods, ['acquire', 'renew', 'release']);
  assert.deepEqual(fake.requests.slice(1).map((r) => r.leaseId.toString()), ['L1', 'L2']);

  const lapsed = await client.acquire('jobs', [D('job', 'export')]);
  await assert.rejects(lapsed.renew(), LeaseLostError);
  await lapsed.release(); // lost: nothing to give back
  assert.deepEqual(releases(fake), ['L2']);
});

test('release: a failure rejects, each time, after one Release; the lease ends', async (t) => {
  const down = Object.assign(new Error('down'), { code: grpc.status.UNAVAILABLE, details: 'down' });
  const { fake, client } = await leaseServer(t, { release: [down] });
  const lease = await client.acquire('jobs', [D('job', 'export')]);
  await assert.rejects(lease.release(), (err) => err.code === grpc.status.UNAVAILABLE);
  await assert.rejects(lease.release(), (err) => err.code === grpc.status.UNAVAILABLE);
  assert.equal(fake.requests.length, 2);
});

test('release: runs after the acquire was aborted, within a deadline of its own', async (t) => {
  const { fake, client } = await leaseServer(t, { release: [{}, 'hang'] });
  const ac = new AbortController();
  const lease = await client.acquire('jobs', [D('job', 'export')], { signal: ac.signal });
  ac.abort();
  await lease.release();
  assert.deepEqual(releases(fake), ['L1'], 'sent despite the abort');

  client._releaseTimeoutMs = 100; // RELEASE_TIMEOUT_MS, shortened: this Release never answers
  const hung = await client.acquire('jobs', [D('job', 'export')]);
  await assert.rejects(hung.release(), (err) => err.code === grpc.status.DEADLINE_EXCEEDED);
});

test('withSlot: runs fn holding the slot and releases in finally, thrown or not', async (t) => {
  const { fake, client } = await leaseServer(t, { acquire: [admitted('L1'), admitted('L2'), busy()] });
  const got = await withSlot(client, 'jobs', [D('job', 'export')], async (lease) => {
    assert.equal(fake.requests.length, 1, 'not released yet');
    return lease.expiresAt;
  });
  assert.deepEqual(got, expiresAt);
  await assert.rejects(
    withSlot(client, 'jobs', [D('job', 'export')], async () => {
      throw new Error('boom');
    }),
    /boom/,
  );
  let called = false;
  await assert.rejects(
    withSlot(client, 'jobs', [D('job', 'export')], () => {
      called = true;
    }),
    (err) => err instanceof SlotRefusedError && err.decision.retryAfterMs === 1000,
  );
  assert.equal(called, false);
  assert.deepEqual(releases(fake), ['L1', 'L2']);
});

test('withSlot: a release that fails is logged, not thrown over fn result', async (t) => {
  const down = Object.assign(new Error('down'), { code: grpc.status.UNAVAILABLE, details: 'down' });
  const fake = await startFake(() => okResponse(), { acquire: () => admitted(), release: () => { throw down; }, renew: () => ({}) });
  t.after(() => fake.stop());
  const logger = quiet();
  const client = new Client(fake.addr, { timeoutMs: 5000, logger });
  t.after(() => client.close());
  assert.equal(await withSlot(client, 'jobs', [D('job', 'export')], () => 42), 42);
  assert.match(logger.lines.warn[0], /release failed/);
});

test('giveBack: sent as give_back; malformed with checkOnly or in acquire; never refused from memory', async (t) => {
  const answers = [overResponse(), okResponse(), okResponse()];
  const fake = await startFake(() => answers.shift());
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  assert.equal((await client.shouldRateLimit('d', [D('tokens', 'u')])).allowed, false);
  const back = { ...D('tokens', 'u'), hits: 3, giveBack: true };
  // The refusal is remembered, under the key a give-back of the same
  // descriptor has too: a request giving back is sent all the same.
  await client.shouldRateLimit('d', [{ ...D('tokens', 'u'), giveBack: true }]);
  await client.shouldRateLimit('d', [D('tokens', 'u'), back]);
  assert.equal(fake.requests.length, 3, 'a request giving back was refused from memory');
  assert.deepEqual(fake.requests[2].descriptors.map((d) => d.giveBack), [false, true]);
  await assert.rejects(client.shouldRateLimit('d', [{ ...back, checkOnly: true }]), (err) => err instanceof RateLimitError && err.code === 3);
  await assert.rejects(client.acquire('d', [back]), (err) => err instanceof RateLimitError && err.code === 3);
  assert.equal(fake.requests.length, 3);
});

/** until waits, a turn of the event loop at a time, for cond to hold. */
async function until(cond) {
  for (let i = 0; i < 2000 && !cond(); i++) await new Promise((resolve) => setTimeout(resolve, 1));
  assert.ok(cond(), String(cond));
}

test('autoRenew: renews halfway to the expiry until released; the release aborts a renewal in flight', async (t) => {
  const later = new Date(expiresAt.getTime() + 60000);
  const { fake, client } = await leaseServer(t, {
    acquire: [admitted('L1'), admitted('L3')],
    renew: [{ code: pb.Code.CODE_OK, lease: { id: Buffer.from('L2'), expiresAt: later } }, 'hang', { code: pb.Code.CODE_OVER_LIMIT }],
  }, { autoRenew: true });
  const timers = [];
  client._setTimer = (f, ms) => {
    timers.push({ f, ms });
    return {};
  };
  const lease = await client.acquire('jobs', [D('job', 'export')]);
  assert.equal(timers.length, 1);
  const half = (expiresAt.getTime() - Date.now()) / 2;
  assert.ok(Math.abs(timers[0].ms - half) < 5000, `first renewal in ${timers[0].ms} ms, want about ${half}`);
  timers[0].f();
  await until(() => timers.length === 2);
  assert.deepEqual(lease.expiresAt, later);
  timers[1].f(); // this renewal never answers
  await until(() => fake.methods.length === 3);
  await lease.release();
  assert.deepEqual(fake.methods, ['acquire', 'renew', 'renew', 'release']);
  assert.deepEqual(releases(fake), ['L2']);
  assert.equal(timers.length, 2, 'no renewal after the release');

  const lost = await client.acquire('jobs', [D('job', 'export')]);
  timers[2].f();
  await until(() => client._logger.lines.warn.length === 1);
  assert.match(client._logger.lines.warn[0], /lost/);
  assert.equal(timers.length, 3);
  await lost.release();
});
