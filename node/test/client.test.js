'use strict';
// The Client against an in-process gRPC server of the native API.

const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const { Client, D, ratelimitV1: pb } = require('..');
const { startFake, okResponse, overResponse } = require('./helpers.js');

/** quiet is a logger that records instead of printing. */
function quiet() {
  const lines = { warn: [], error: [] };
  return { lines, warn: (m) => lines.warn.push(m), error: (m) => lines.error.push(m) };
}

test('an allowed request: the decision mirrors the answer', async (t) => {
  const fake = await startFake(() => okResponse());
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  const d = await client.shouldRateLimit('edge', [D('remote_address', '10.0.0.1')]);
  assert.deepEqual(d, {
    allowed: true,
    statuses: [
      {
        overLimit: false,
        limit: { name: 'per_ip', requests: 10, windowMs: 60000, algorithm: 'sliding_window', burst: 10 },
        remaining: 9,
        resetAfterMs: 42500,
        retryAfterMs: 0,
        unlimited: false,
      },
    ],
    retryAfterMs: 0,
    headers: [
      { name: 'RateLimit-Policy', value: '"per_ip";q=10;w=60' },
      { name: 'RateLimit', value: '"per_ip";r=9;t=43' },
    ],
    error: null,
    local: false,
  });
  assert.equal(fake.requests.length, 1);
  assert.equal(fake.requests[0].domain, 'edge');
  assert.deepEqual(fake.requests[0].descriptors[0].entries[0].value, '10.0.0.1');
  assert.equal(fake.requests[0].descriptors[0].hits, undefined, 'hits unset means the request default');
});

test('a refusal: retryAfterMs is the longest of the descriptors over their limit', async (t) => {
  const resp = overResponse();
  resp.statuses.push({ ...resp.statuses[0], retryAfter: { seconds: 3, nanos: 0 } });
  resp.statuses.push({ code: pb.Code.CODE_OK, remaining: 5, retryAfter: { seconds: 50, nanos: 0 } });
  const fake = await startFake(() => resp);
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  const d = await client.shouldRateLimit('edge', [D('a', '1'), D('b', '2'), D('c', '3')]);
  assert.equal(d.allowed, false);
  assert.equal(d.retryAfterMs, 12100);
  assert.deepEqual(d.statuses.map((s) => s.overLimit), [true, true, false]);
  assert.equal(d.statuses[2].limit, null);
  assert.equal(d.statuses[0].limit.algorithm, 'sliding_log');
});

test('values are sent as ratelimitd counts them; hits, checkOnly and limit overrides', async (t) => {
  const fake = await startFake(() => okResponse());
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  const long = 'x'.repeat(1025);
  const raw = Buffer.from([0x6b, 0xff]);
  await client.shouldRateLimit('edge', [
    { entries: [{ key: 'long', value: long }], hits: 3 },
    { entries: [{ key: 'raw', value: raw }, { key: 'utf8', value: Buffer.from('é') }], checkOnly: true, hits: 7 },
    { entries: [{ key: 'tenant', value: 'acme' }], limit: { requests: 5, windowMs: 1500 } },
    { entries: [{ key: 'edge', value: 'x'.repeat(1024) }] },
  ]);
  const [d0, d1, d2, d3] = fake.requests[0].descriptors;
  assert.equal(d0.entries[0].value, '');
  assert.deepEqual(Buffer.from(d0.entries[0].valueSha256), crypto.createHash('sha256').update(long).digest());
  assert.equal(d0.hits, 3);
  assert.deepEqual(Buffer.from(d1.entries[0].rawValue), raw);
  assert.equal(d1.entries[0].value, '');
  assert.equal(d1.entries[1].value, 'é');
  assert.equal(d1.hits, 0, 'checkOnly sends hits 0');
  assert.deepEqual(d2.limit, { requests: 5, window: { seconds: 1, nanos: 500000000 } });
  assert.equal(d2.hits, undefined);
  assert.equal(d3.entries[0].value.length, 1024, 'a value of exactly 1024 bytes is sent as it is');
});

test('malformed requests are refused before any RPC, whatever the policy', async (t) => {
  const fake = await startFake(() => okResponse());
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  const bad = [
    ['', [D('k', 'v')]],
    ['d'.repeat(257), [D('k', 'v')]],
    ['edge', []],
    ['edge', Array.from({ length: 65 }, () => D('k', 'v'))],
    ['edge', [{ entries: [] }]],
    ['edge', [{ entries: Array.from({ length: 33 }, () => ({ key: 'k', value: 'v' })) }]],
    ['edge', [D('', 'v')]],
    ['edge', [D('k'.repeat(1025), 'v')]],
    ['edge', [D('k\uD800', 'v')]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], hits: 2 ** 32 }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: 0 } }]],
    // Limit overrides ratelimitd refuses: windows out of [1 ms, 100 years]
    // or not whole microseconds; requests not a uint32.
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: 1e25 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: 1e-4 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: 0.999 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: 100 * 365 * 86400e3 + 1 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: 1.0005 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: Infinity } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: NaN } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1, windowMs: '1000' } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 1.5, windowMs: 1000 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: -1, windowMs: 1000 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], limit: { requests: 2 ** 32, windowMs: 1000 } }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], hits: 1.5 }]],
    ['edge', [{ entries: [{ key: 'k', value: 'v' }], hits: -1 }]],
    ['edge', [{ entries: [{ key: 'k', value: 1 }] }]],
  ];
  for (const [domain, ds] of bad) {
    await assert.rejects(client.shouldRateLimit(domain, ds), (err) => err.code === grpc.status.INVALID_ARGUMENT, `${domain.slice(0, 10)} ${JSON.stringify(ds).slice(0, 80)}`);
  }
  assert.equal(fake.requests.length, 0);
  // A request over 1 MiB once long values are digested.
  const big = Array.from({ length: 64 }, () => ({ entries: Array.from({ length: 32 }, () => ({ key: 'k'.repeat(1024), value: 'v' })) }));
  await assert.rejects(client.shouldRateLimit('edge', big), (err) => err.code === grpc.status.INVALID_ARGUMENT && /over the maximum/.test(err.message));
  assert.equal(fake.requests.length, 0);
  // Values over 1 MiB in all, but each up to 1024 bytes, so not digested.
  const bigValues = Array.from({ length: 64 }, () => ({ entries: Array.from({ length: 32 }, () => ({ key: 'k', value: 'v'.repeat(1024) })) }));
  await assert.rejects(client.shouldRateLimit('edge', bigValues), (err) => err.code === grpc.status.INVALID_ARGUMENT && /over the maximum/.test(err.message));
  assert.equal(fake.requests.length, 0);
  // Near the limit but under it (about 0.95 MiB): measured, and sent.
  const near = Array.from({ length: 64 }, () => ({ entries: Array.from({ length: 32 }, () => ({ key: 'k', value: 'v'.repeat(450) })) }));
  const d = await client.shouldRateLimit('edge', near);
  assert.equal(d.error, null);
  assert.equal(fake.requests.length, 1);
});

test('limit overrides at the bounds go out exact, to the microsecond', async (t) => {
  const fake = await startFake(() => ({ code: pb.Code.CODE_OK, statuses: [{}, {}, {}] }));
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  await client.shouldRateLimit('edge', [
    { entries: [{ key: 'k', value: 'a' }], limit: { requests: 0, windowMs: 1 } },
    { entries: [{ key: 'k', value: 'b' }], limit: { requests: 2 ** 32 - 1, windowMs: 1.001 } },
    { entries: [{ key: 'k', value: 'c' }], limit: { requests: 1, windowMs: 100 * 365 * 86400e3 } },
  ]);
  assert.deepEqual(
    fake.requests[0].descriptors.map((d) => d.limit),
    [
      { requests: 0, window: { seconds: 0, nanos: 1000000 } },
      { requests: 2 ** 32 - 1, window: { seconds: 0, nanos: 1001000 } },
      { requests: 1, window: { seconds: 100 * 365 * 86400, nanos: 0 } },
    ],
  );
});

test("ratelimitd's INVALID_ARGUMENT is thrown, not decided by the policy", async (t) => {
  const fake = await startFake(() => {
    throw { code: grpc.status.INVALID_ARGUMENT, details: 'unknown domain' };
  });
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000 });
  t.after(() => client.close());
  await assert.rejects(client.shouldRateLimit('edge', [D('k', 'v')]), (err) => err.code === grpc.status.INVALID_ARGUMENT);
  assert.equal(client.failOpens, 0);
});

test('failures fail open by default, counted, with the error', async (t) => {
  const fake = await startFake(() => {
    throw { code: grpc.status.UNAVAILABLE, details: 'store down' };
  });
  t.after(() => fake.stop());
  const seen = [];
  const client = new Client(fake.addr, { timeoutMs: 5000, onDecision: (d, info) => seen.push([d.allowed, info.domain]) });
  t.after(() => client.close());
  for (let i = 0; i < 2; i++) {
    const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
    assert.equal(d.allowed, true);
    assert.equal(d.error.code, grpc.status.UNAVAILABLE);
    assert.deepEqual(d.statuses, []);
  }
  assert.equal(client.failOpens, 2);
  assert.equal(client.failures, 2);
  assert.deepEqual(seen, [[true, 'edge'], [true, 'edge']]);
});

test('failClosed refuses when ratelimitd fails, without counting a fail-open', async (t) => {
  const fake = await startFake(() => {
    throw { code: grpc.status.INTERNAL, details: 'boom' };
  });
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000, failClosed: true });
  t.after(() => client.close());
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.allowed, false);
  assert.equal(d.retryAfterMs, 0);
  assert.equal(d.error.code, grpc.status.INTERNAL);
  assert.equal(client.failOpens, 0);
  assert.equal(client.failures, 1);
});

test('a server slower than the budget: the policy decides, with DEADLINE_EXCEEDED', async (t) => {
  const fake = await startFake(() => 'hang');
  t.after(() => fake.stop());
  const client = new Client(fake.addr); // the default budget, 50 ms
  t.after(() => client.close());
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.allowed, true);
  assert.equal(d.error.code, grpc.status.DEADLINE_EXCEEDED);
  assert.equal(client.failOpens, 1);
});

test("an aborted signal rejects the call: it is the caller's, not a failure", async (t) => {
  const fake = await startFake(() => 'hang');
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 0 });
  t.after(() => client.close());
  const ac = new AbortController();
  const p = client.shouldRateLimit('edge', [D('k', 'v')], { signal: ac.signal });
  ac.abort(new Error('caller gave up'));
  await assert.rejects(p, /caller gave up/);
  await assert.rejects(client.shouldRateLimit('edge', [D('k', 'v')], { signal: ac.signal }), /caller gave up/);
  assert.equal(client.failures, 0);
});

test('UNIMPLEMENTED (a server without the native API) is logged loudly, once', async (t) => {
  const fake = await startFake(null);
  t.after(() => fake.stop());
  const logger = quiet();
  const client = new Client(fake.addr, { timeoutMs: 5000, logger });
  t.after(() => client.close());
  for (let i = 0; i < 3; i++) {
    const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
    assert.equal(d.allowed, true);
    assert.equal(d.error.code, grpc.status.UNIMPLEMENTED);
  }
  assert.deepEqual(logger.lines.warn, [], 'logged at error, as the Go client does');
  assert.equal(logger.lines.error.length, 1);
  assert.match(logger.lines.error[0], /UNIMPLEMENTED.*envoyproxy\/ratelimit/s);
  assert.match(logger.lines.error[0], new RegExp(fake.addr));
  assert.equal(client.failOpens, 3);
});

test('a hook that throws is logged, and the decision stands', async (t) => {
  const fake = await startFake(() => overResponse());
  t.after(() => fake.stop());
  const logger = quiet();
  const client = new Client(fake.addr, {
    timeoutMs: 5000,
    logger,
    onDecision: () => {
      throw new Error('hook bug');
    },
  });
  t.after(() => client.close());
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.allowed, false);
  assert.match(logger.lines.error[0], /hook bug/);
});

test('a Client over a stub client the caller owns', async (t) => {
  const fake = await startFake(() => okResponse());
  t.after(() => fake.stop());
  const rls = new pb.RateLimitServiceClient(fake.addr, grpc.credentials.createInsecure());
  t.after(() => rls.close());
  const client = new Client(rls, { timeoutMs: 5000 });
  client.close(); // not ours to close
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.allowed, true);
  assert.equal(d.error, null);
});

test('D pairs keys and values, and refuses an odd count', () => {
  assert.deepEqual(D('path', '/login', 'remote_address', '10.0.0.1'), {
    entries: [{ key: 'path', value: '/login' }, { key: 'remote_address', value: '10.0.0.1' }],
  });
  assert.throws(() => D('k'), TypeError);
});
