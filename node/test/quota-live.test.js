'use strict';
// The quota mode against real ratelimitd processes (RATELIMITD_BIN): the
// assignments of each kind decide, through allow, shouldRateLimit and
// the middleware; and Quotas spread over 3 replicas sharing one
// redis-server admit, together, a limit's worth.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const { Quota, D, middleware, NoAssignmentError } = require('..');
const { BIN, startDaemon, startRedis } = require('./daemon.js');

const skip = BIN ? false : 'RATELIMITD_BIN is not set';
const quiet = { warn() {}, error() {} };

/** writeRules writes yaml to a temporary file, removed after t, and returns its path. */
function writeRules(t, yaml) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimitd-quota-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const p = path.join(dir, 'rules.yaml');
  fs.writeFileSync(p, yaml);
  return p;
}

/** quota returns a Quota on addr, closed after t. */
function quota(t, addr, options) {
  const q = new Quota(addr, { logger: quiet, ...options });
  t.after(() => q.close());
  return q;
}

/**
 * decided waits until an assignment of ratelimitd, not the failure
 * policy, decides d (asked with checkOnly, which takes no token); 30 s
 * at most.
 */
async function decided(q, d) {
  for (const deadline = Date.now() + 30000; Date.now() < deadline; await sleep(5)) {
    const got = await q.shouldRateLimit(q.domain, [{ ...d, checkOnly: true }]);
    if (got.error === null) return;
  }
  assert.fail(`${JSON.stringify(d)}: no assignment in 30 s`);
}

const rules = `
domain: q
descriptors:
  - key: limited
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: open
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`;

test('a Quota decides under the assignments of a live ratelimitd', { skip }, async (t) => {
  const addr = await startDaemon(t, writeRules(t, rules));
  const q = quota(t, addr, { domain: 'q', failClosed: true, reportingIntervalMs: 60000 });

  await t.test('each kind of assignment, all or nothing', async () => {
    const open = D('open', 'x');
    const banned = D('banned', 'x');
    const none = D('no_rule', 'x');
    assert.equal(q.allow([open]), false, 'before any assignment: the failure policy, closed');
    const first = await q.shouldRateLimit('q', [open]);
    assert.ok(first.error instanceof NoAssignmentError);
    for (const d of [open, banned, none]) await decided(q, d);
    for (const [ds, want] of [
      [[open], true],
      [[banned], false],
      [[none], true],
      [[open, none], true],
      [[open, banned], false],
    ]) {
      for (let i = 0; i < 20; i++) assert.equal(q.allow(ds), want, JSON.stringify(ds));
    }
    const refused = await q.shouldRateLimit('q', [open, banned]);
    assert.equal(refused.error, null);
    assert.deepEqual(refused.statuses.map((s) => s.overLimit), [false, true]);
  });

  await t.test('a token bucket admits about the limit; a value of any bytes is a bucket of its own', async () => {
    let now = 0;
    const qc = quota(t, addr, { domain: 'q', failClosed: true, reportingIntervalMs: 60000, clock: () => now });
    for (const value of ['a', new Uint8Array([0xff, 0xfe])]) {
      const d = D('limited', value);
      await decided(qc, d);
      let admitted = 0;
      for (let i = 0; i < 500; i++) {
        for (let j = 0; j < 5; j++) if (qc.allow([d])) admitted++;
        now += 10;
      }
      // 5 s of the Quota's clock at 10 per second, from a full bucket.
      assert.ok(admitted >= 40 && admitted <= 60, `${value}: ${admitted} admitted over 5 s under 10/s, want 40 to 60`);
    }
  });

  await t.test('the middleware takes a Quota', async (t2) => {
    const mw = middleware(q, 'q', { descriptors: (req) => [D(req.headers.kind, 'mw')], clientIP: false });
    for (const kind of ['banned', 'open']) await decided(q, D(kind, 'mw'));
    const server = http.createServer((req, res) => mw(req, res, () => res.writeHead(204).end()));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    t2.after(() => server.close());
    const get = (kind) =>
      new Promise((resolve, reject) => {
        http.get({ port: server.address().port, host: '127.0.0.1', path: '/x', headers: { kind } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res));
        }).on('error', reject);
      });
    const banned = await get('banned');
    assert.equal(banned.statusCode, 429);
    assert.ok(banned.headers['retry-after']);
    assert.equal((await get('open')).statusCode, 204);
  });
});

// The Go test's rules (cmd/ratelimitd/rlqs_replicas_test.go): tenant acme
// may make 200 requests a second, a burst of 40.
const sharedRules = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 200, burst: 40}
`;

test('Quotas over 3 replicas on one Redis admit the limit together', { skip }, async (t) => {
  const limit = 200;
  const burst = 40;
  const clients = 8;
  const perSec = 100; // each: 4 times the limit in all
  const periodMs = Number(process.env.QUOTA_PERIOD_MS || 10000);
  const redis = await startRedis(t);
  const config = writeRules(t, sharedRules);
  const replicas = await Promise.all(
    [0, 1, 2].map(() => startDaemon(t, config, '--backend', `redis://${redis}`, '--rlqs-sync-interval', '250ms', '--failure-mode', 'deny')),
  );
  const qs = [];
  for (let i = 0; i < clients; i++) {
    qs.push(quota(t, replicas[i % 3], { domain: 'quota', reportingIntervalMs: 500, failClosed: true }));
  }
  const d = [D('tenant', 'acme')];
  const admitted = new Array(clients).fill(0);
  const refused = new Array(clients).fill(0);
  // Counted from the end of a warm-up (two reporting intervals), as the Go
  // test counts a long period: until the first assignments arrive, a
  // client that fails closed admits nothing, a loss the bounds leave no
  // room for.
  const warmupMs = 1000;
  const begun = performance.now();
  let start = 0;
  let base = 0;
  await new Promise((resolve) => {
    const tick = setInterval(() => {
      for (let i = 0; i < clients; i++) {
        if (qs[i].allow(d)) admitted[i]++;
        else refused[i]++;
      }
      const now = performance.now();
      if (start === 0 && now - begun >= warmupMs) {
        start = now;
        base = admitted.reduce((a, b) => a + b, 0);
      }
      if (start !== 0 && now - start >= periodMs) {
        clearInterval(tick);
        resolve();
      }
    }, 1000 / perSec);
  });
  const elapsed = (performance.now() - start) / 1000;
  const total = admitted.reduce((a, b) => a + b, 0) - base;
  const want = limit * elapsed;
  // The Go test's bounds: -5% to +1% of the limit, plus a burst per client
  // (a client's bucket starts full).
  const lo = 0.95 * want;
  const hi = 1.01 * want + clients * burst;
  t.diagnostic(
    `${total} admitted, ${refused.reduce((a, b) => a + b, 0)} refused in ${elapsed.toFixed(3)} s: ` +
      `${(total / want).toFixed(3)} of the limit's ${want.toFixed(0)} (bounds ${lo.toFixed(0)} to ${hi.toFixed(0)}); per client ${admitted.join(' ')}`,
  );
  assert.ok(total >= lo && total <= hi, `admitted ${total} in ${elapsed.toFixed(3)} s, want ${lo.toFixed(0)} to ${hi.toFixed(0)}`);
});
