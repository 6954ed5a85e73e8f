'use strict';
// The Client over a cold connection: it connects when made, and a call
// waits for the handshake within the connect budget, not its own; a call
// while ratelimitd is down still fails open at once. Over real gRPC on
// loopback, through a proxy that delays the handshake.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Client, D, grpc, ratelimitV1 } = require('..');
const { startFake, okResponse, startProxy, closedAddr } = require('./helpers.js');

// A handshake takes this long: more than these tests' call budget
// (BUDGET_MS, long enough for an answer on a loaded machine), less than
// the default connect budget (1 s).
const DELAY_MS = 500;
const BUDGET_MS = 250;

/** serve starts a fake ratelimitd and a proxy to it with delayMs, stopped after t. */
async function serve(t, delayMs) {
  const fake = await startFake(() => okResponse());
  t.after(() => fake.stop());
  const proxy = await startProxy(fake.addr, delayMs);
  t.after(() => proxy.close());
  return { fake, proxy };
}

/** client makes a Client of addr with options, closed after t. */
function client(t, addr, options) {
  const c = new Client(addr, options);
  t.after(() => c.close());
  return c;
}

/** timed calls c.shouldRateLimit and returns [decision, milliseconds]. */
async function timed(c, options) {
  const start = performance.now();
  const d = await c.shouldRateLimit('edge', [D('k', 'v')], options);
  return [d, performance.now() - start];
}

/** waitState waits until c's channel is in state (without asking it to connect), for 10 s at most. */
async function waitState(c, ...states) {
  const ch = c._rls.getChannel();
  const deadline = Date.now() + 10000;
  for (let s = ch.getConnectivityState(false); !states.includes(s); s = ch.getConnectivityState(false)) {
    const changed = await new Promise((resolve) => ch.watchConnectivityState(s, deadline, (err) => resolve(!err)));
    if (!changed) assert.fail(`channel in state ${s} after 10 s, want one of ${states}`);
  }
}

test('the first call over a cold connection gets the decision though the handshake outlasts its budget', async (t) => {
  const { proxy } = await serve(t, DELAY_MS);
  const c = client(t, proxy.addr, { timeoutMs: BUDGET_MS });
  const d = await c.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.error, null);
  assert.equal(d.statuses[0].remaining, 9);
  assert.equal(c.failOpens, 0);
});

test('a Client starts connecting when made', async (t) => {
  const { proxy } = await serve(t, 0);
  client(t, proxy.addr);
  let timer;
  const connected = await Promise.race([proxy.accepted.then(() => true), new Promise((r) => (timer = setTimeout(r, 10000, false)))]);
  clearTimeout(timer);
  assert.ok(connected, 'no connection 10 s after new Client()');
});

test('after ratelimitd restarts, the next call reconnects and gets the decision though the handshake outlasts its budget', async (t) => {
  const { fake, proxy } = await serve(t, 0);
  const c = client(t, proxy.addr, { timeoutMs: BUDGET_MS, refusalCacheMs: 0 });
  assert.equal((await c.shouldRateLimit('edge', [D('k', 'v')], { timeoutMs: 30000 })).error, null);
  proxy.drop(DELAY_MS);
  await waitState(c, 0, 1, 3); // IDLE, CONNECTING or TRANSIENT_FAILURE: not READY
  const d = await c.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.error, null);
  assert.equal(fake.requests.length, 2);
});

test('examples/node/client.js with ratelimitd down prints the failure policy decisions and succeeds', async (t) => {
  const example = path.join(__dirname, '..', '..', 'examples', 'node', 'client.js');
  if (!fs.existsSync(example)) {
    t.skip('examples/ not found beside the package');
    return;
  }
  // The example requires 'ratelimitd': resolve it to this package.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimitd-example-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.symlinkSync(path.join(__dirname, '..'), path.join(dir, 'ratelimitd'), 'dir');
  const addr = await closedAddr();
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, [example, addr], { env: { ...process.env, NODE_PATH: dir }, timeout: 30000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
    );
  }).catch((err) => err);
  assert.ok(!(out instanceof Error), String(out));
  const lines = out.trim().split('\n');
  assert.equal(lines.length, 7, out);
  lines.forEach((l, i) => assert.match(l, new RegExp(`^login ${i + 1}: ratelimitd failed \\(.*\\): allowed anyway \\(fail open\\)$`)));
});

test('ratelimitd down (connections refused): calls fail open at once, without waiting for the connect budget', async (t) => {
  const c = client(t, await closedAddr(), { connectTimeoutMs: 60000 });
  for (let i = 0; i < 3; i++) {
    const [d, ms] = await timed(c);
    assert.equal(d.allowed, true);
    assert.equal(d.error.code, 14, `call ${i}: ${d.error.message}`); // UNAVAILABLE
    assert.ok(ms < 10000, `call ${i} took ${ms} ms: it waited for the connect budget (60 s)`);
  }
});

test('a hung host: calls wait for the connect budget once, counted from the making, then no more; an abort ends the wait', async (t) => {
  const { proxy } = await serve(t, -1);
  const connectMs = 1000;
  const c = client(t, proxy.addr, { timeoutMs: BUDGET_MS, connectTimeoutMs: connectMs });
  // Calls made together share the wait (one watch of the channel).
  const first = await Promise.all([timed(c), timed(c), timed(c)]);
  for (const [d, ms] of first) {
    assert.equal(d.allowed, true);
    assert.equal(d.error.code, 4, d.error.message); // DEADLINE_EXCEEDED
    assert.ok(ms >= connectMs - 5 && ms < 10000, `first calls took ${ms} ms, want the connect budget and the call's`);
  }
  for (let i = 0; i < 2; i++) {
    const [d, ms] = await timed(c);
    assert.equal(d.error.code, 4, d.error.message);
    assert.ok(ms < connectMs, `later call ${i} took ${ms} ms: it waited for the connect budget again`);
  }

  const c2 = client(t, proxy.addr, { connectTimeoutMs: 60000 });
  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error('caller gave up')), 50);
  const start = performance.now();
  await assert.rejects(c2.shouldRateLimit('edge', [D('k', 'v')], { signal: ac.signal }), /caller gave up/);
  assert.ok(performance.now() - start < 10000);
  assert.equal(c2.failures, 0);
});

test('ratelimitd going away after the channel was ready: calls fail open at once, and get decisions again once it is back', async (t) => {
  const { fake, proxy } = await serve(t, 0);
  const c = client(t, proxy.addr, { timeoutMs: BUDGET_MS, connectTimeoutMs: 60000 });
  assert.equal((await c.shouldRateLimit('edge', [D('k', 'v')], { timeoutMs: 30000 })).error, null);
  await proxy.close();
  await waitState(c, 0, 1, 3);
  for (let i = 0; i < 3; i++) {
    const [d, ms] = await timed(c);
    assert.equal(d.allowed, true);
    assert.equal(d.error.code, 14, `call ${i} while down: ${d.error.message}`);
    assert.ok(ms < 10000, `call ${i} while down took ${ms} ms: it waited for the connect budget (60 s)`);
  }
  const back = await startProxy(fake.addr, 0, proxy.port);
  t.after(() => back.close());
  const deadline = Date.now() + 30000;
  for (;;) {
    const [d, ms] = await timed(c);
    assert.ok(ms < 10000, `a call while reconnecting took ${ms} ms: it waited for the connect budget`);
    if (d.error === null) break;
    assert.ok(Date.now() < deadline, `no decision 30 s after ratelimitd came back: ${d.error.message}`);
    await waitState(c, 2); // READY, after grpc-js's backoff (about a second)
  }
});

test('a stub client without getChannel() is used as it is: the first call pays the handshake from its budget', async (t) => {
  const { proxy } = await serve(t, DELAY_MS);
  const stub = new ratelimitV1.RateLimitServiceClient(proxy.addr, grpc.credentials.createInsecure());
  t.after(() => stub.close());
  const c = new Client({ shouldRateLimit: (...args) => stub.shouldRateLimit(...args) }, { timeoutMs: BUDGET_MS });
  const [d, ms] = await timed(c);
  assert.equal(d.allowed, true);
  assert.equal(d.error.code, 4, d.error.message); // DEADLINE_EXCEEDED
  assert.ok(ms < DELAY_MS, `took ${ms} ms: it waited for the connection`);
});
