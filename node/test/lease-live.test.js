'use strict';
// Live checks of acquire, Lease, withSlot and giveBack against a real
// ratelimitd, when RATELIMITD_BIN names its binary: a daemon of its own,
// with the concurrency rules below, on free loopback ports.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Client, D, withSlot, LeaseLostError, SlotRefusedError } = require('..');

const { BIN, startDaemon } = require('./daemon.js');

const RULES = `
domain: nodejobs
descriptors:
  - key: job
    rate_limit: {name: jobs, algorithm: concurrency, window: 1m, requests_per_unit: 2}
  - key: tokens
    rate_limit: {name: tokens, algorithm: sliding_log, unit: minute, requests_per_unit: 10}
`;

const run = `${process.pid}-${Date.now()}`;

test('live ratelimitd: leases and give-backs', { skip: BIN ? false : 'RATELIMITD_BIN is not set' }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimitd-node-lease-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.writeFileSync(path.join(dir, 'nodejobs.yaml'), RULES);
  const addr = await startDaemon(t, dir);
  const client = new Client(addr, { timeoutMs: 5000, failClosed: true });
  t.after(() => client.close());

  await t.test('at most two slots; a release frees exactly its own', async () => {
    const job = D('job', `slots-${run}`);
    const first = await client.acquire('nodejobs', [job]);
    const second = await client.acquire('nodejobs', [job]);
    assert.equal(first.allowed, true, JSON.stringify(first.decision));
    assert.equal(second.allowed, true);
    assert.ok(first.expiresAt.getTime() > Date.now() + 30000);
    const third = await client.acquire('nodejobs', [job]);
    assert.equal(third.allowed, false);
    assert.deepEqual(
      [third.decision.statuses[0].limit.name, third.decision.statuses[0].limit.algorithm],
      ['jobs', 'concurrency'],
    );
    await second.renew();
    await Promise.all([second.release(), second.release()]);
    const again = await client.acquire('nodejobs', [job]);
    assert.equal(again.allowed, true);
    assert.equal((await client.acquire('nodejobs', [job])).allowed, false, 'a release freed more than its slot');
    await first.release();
    await again.release();
    await assert.rejects(first.renew(), LeaseLostError);
  });

  await t.test('withSlot holds the slot while fn runs', async () => {
    const job = D('job', `with-${run}`);
    await withSlot(client, 'nodejobs', [job], async () => {
      await withSlot(client, 'nodejobs', [job], async () => {
        await assert.rejects(
          withSlot(client, 'nodejobs', [job], () => {}),
          SlotRefusedError,
        );
      });
    });
    for (let i = 0; i < 3; i++) await withSlot(client, 'nodejobs', [job], () => {});
  });

  await t.test('giveBack returns hits, never past the limit', async () => {
    const user = `tokens-${run}`;
    assert.equal((await client.shouldRateLimit('nodejobs', [{ ...D('tokens', user), hits: 10 }])).allowed, true);
    assert.equal((await client.shouldRateLimit('nodejobs', [D('tokens', user)])).allowed, false);
    const d = await client.shouldRateLimit('nodejobs', [{ ...D('tokens', user), hits: 4, giveBack: true }]);
    assert.equal(d.statuses[0].remaining, 4);
    assert.equal((await client.shouldRateLimit('nodejobs', [{ ...D('tokens', user), hits: 4 }])).allowed, true);
    assert.equal((await client.shouldRateLimit('nodejobs', [D('tokens', user)])).allowed, false);
  });
});
