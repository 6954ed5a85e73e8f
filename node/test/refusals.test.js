'use strict';
// The Client's memory of refusals, against an in-process gRPC server of the
// native API, on a clock the tests move by hand.

const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { Client, D, ratelimitV1: pb, DEFAULT_REFUSAL_CACHE_MS, DEFAULT_REFUSAL_CACHE_SIZE } = require('..');
const { refusalKey, localHeaders, countDownT } = require('../lib/refusals.js');
const { startFake, okResponse, overResponse } = require('./helpers.js');

/**
 * setup starts a fake ratelimitd answering answer and a Client of it on a
 * clock at 0 ms; clock.now moves it.
 */
async function setup(t, answer, options = {}) {
  const fake = await startFake(answer);
  t.after(() => fake.stop());
  const clock = { now: 0 };
  const client = new Client(fake.addr, { timeoutMs: 5000, clock: () => clock.now, ...options });
  t.after(() => client.close());
  return { fake, client, clock };
}

/** refusing is a response refusing one descriptor for retryMs. */
function refusing(retryMs) {
  const resp = overResponse();
  resp.statuses[0].retryAfter = { seconds: Math.floor(retryMs / 1000), nanos: (retryMs % 1000) * 1e6 };
  return resp;
}

/** with_ returns a copy of d with extra (hits, checkOnly, limit) set. */
function with_(d, extra) {
  return { ...d, ...extra };
}

test('the defaults: on, 1 s, 10000 refusals', () => {
  assert.equal(DEFAULT_REFUSAL_CACHE_MS, 1000);
  assert.equal(DEFAULT_REFUSAL_CACHE_SIZE, 10000);
});

test('a refusal is repeated locally, without an RPC, counted down, until the 1 s cap', async (t) => {
  const { fake, client, clock } = await setup(t, () => overResponse()); // retry after 12.1 s
  const first = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.deepEqual([first.allowed, first.local, first.retryAfterMs], [false, false, 12100]);
  assert.equal(fake.requests.length, 1);

  clock.now = 999;
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(fake.requests.length, 1, 'answered without an RPC');
  assert.deepEqual(d, {
    allowed: false,
    statuses: [
      {
        overLimit: true,
        limit: { name: 'per_ip', requests: 2, windowMs: 60000, algorithm: 'sliding_log', burst: 2 },
        remaining: 0,
        resetAfterMs: 30000 - 999,
        retryAfterMs: 12100 - 999,
        unlimited: false,
      },
    ],
    retryAfterMs: 12100 - 999,
    headers: [
      { name: 'RateLimit-Policy', value: '"per_ip";q=2;w=60' },
      { name: 'RateLimit', value: '"per_ip";r=0;t=30' }, // under a second: as sent
      { name: 'Retry-After', value: '12' }, // 11.101 s rounded up
    ],
    error: null,
    local: true,
  });
  assert.equal(client.localRefusals, 1);

  // At the cap, ratelimitd is asked again, and its refusal remembered again.
  clock.now = 1000;
  const again = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.deepEqual([again.allowed, again.local, again.retryAfterMs], [false, false, 12100]);
  assert.equal(fake.requests.length, 2);
  clock.now = 1500;
  assert.equal((await client.shouldRateLimit('edge', [D('k', 'v')])).local, true);
  assert.equal(fake.requests.length, 2);
  assert.equal(client.localRefusals, 2);
});

test('refusalCacheMs sets the cap; the headers count down by whole seconds', async (t) => {
  const { fake, client, clock } = await setup(t, () => overResponse(), { refusalCacheMs: 5000 });
  await client.shouldRateLimit('edge', [D('k', 'v')]);
  clock.now = 2500;
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  assert.equal(d.local, true);
  assert.equal(d.retryAfterMs, 9600);
  assert.deepEqual(d.headers, [
    { name: 'RateLimit-Policy', value: '"per_ip";q=2;w=60' },
    { name: 'RateLimit', value: '"per_ip";r=0;t=28' },
    { name: 'Retry-After', value: '10' },
  ]);
  clock.now = 4999;
  assert.equal((await client.shouldRateLimit('edge', [D('k', 'v')])).local, true);
  clock.now = 5000;
  assert.equal((await client.shouldRateLimit('edge', [D('k', 'v')])).local, false);
  assert.equal(fake.requests.length, 2);
});

test('a retry-after under the cap is remembered for that long only', async (t) => {
  let allow = false;
  const { fake, client, clock } = await setup(t, () => (allow ? okResponse() : refusing(400)));
  assert.equal((await client.shouldRateLimit('edge', [D('user', 'u1')])).retryAfterMs, 400);
  clock.now = 399;
  const d = await client.shouldRateLimit('edge', [D('user', 'u1')]);
  assert.deepEqual([d.local, d.retryAfterMs, d.headers[2].value], [true, 1, '1'], 'Retry-After at least 1');
  allow = true;
  clock.now = 400;
  const after = await client.shouldRateLimit('edge', [D('user', 'u1')]);
  assert.deepEqual([after.allowed, after.local], [true, false]);
  assert.equal(fake.requests.length, 2);
});

test('only the same request is refused locally: domain, entries, hits, checkOnly, limit', async (t) => {
  const { fake, client } = await setup(t, (req) => (req.domain === 'other' ? okResponse() : overResponse()));
  const base = D('api_key', 'k1');
  await client.shouldRateLimit('api', [base]);
  // The same request, however spelled: hits 1 is the default, and bytes
  // are counted as the string of the same UTF-8.
  for (const ds of [[base], [with_(base, { hits: 1 })], [{ entries: [{ key: 'api_key', value: Buffer.from('k1') }] }]]) {
    assert.equal((await client.shouldRateLimit('api', ds)).local, true, JSON.stringify(ds));
  }
  assert.equal(fake.requests.length, 1);
  const others = [
    ['api', [D('api_key', 'k2')]],
    ['api', [D('api_key', 'k1', 'x', 'y')]],
    ['api', [base, D('health', 'x')]],
    ['api', [with_(base, { hits: 2 })]],
    ['api', [with_(base, { checkOnly: true })]],
    ['api', [with_(base, { limit: { requests: 1, windowMs: 60000 } })]],
    ['other', [base]],
  ];
  for (const [domain, ds] of others) {
    const d = await client.shouldRateLimit(domain, ds);
    assert.equal(d.local, false, `${domain} ${JSON.stringify(ds)}`);
  }
  assert.equal(fake.requests.length, 1 + others.length);
  assert.equal(client.localRefusals, 3);
});

test('a check-only refusal answers check-only requests only, whatever their hits', async (t) => {
  const { fake, client } = await setup(t, () => overResponse());
  const check = with_(D('api_key', 'k1'), { checkOnly: true, hits: 5 });
  await client.shouldRateLimit('api', [check]);
  assert.equal((await client.shouldRateLimit('api', [with_(check, { hits: 9 })])).local, true, 'hits is ignored by a check');
  assert.equal(fake.requests.length, 1);
  assert.equal((await client.shouldRateLimit('api', [D('api_key', 'k1')])).local, false, 'a hit is not a check');
  assert.equal(fake.requests.length, 2);
  // Now the hit's refusal is remembered too, apart from the check's.
  assert.equal((await client.shouldRateLimit('api', [D('api_key', 'k1')])).local, true);
  assert.equal((await client.shouldRateLimit('api', [check])).local, true);
  assert.equal(fake.requests.length, 2);
});

test('limit overrides are part of the request', async (t) => {
  const { fake, client } = await setup(t, () => overResponse());
  const o = (requests, windowMs) => with_(D('tenant', 'acme'), { limit: { requests, windowMs } });
  await client.shouldRateLimit('api', [o(1, 60000)]);
  assert.equal((await client.shouldRateLimit('api', [o(1, 60000)])).local, true);
  assert.equal((await client.shouldRateLimit('api', [o(2, 60000)])).local, false);
  assert.equal((await client.shouldRateLimit('api', [o(1, 60001)])).local, false);
  assert.equal((await client.shouldRateLimit('api', [D('tenant', 'acme')])).local, false);
  assert.equal(fake.requests.length, 4);
});

test('off with refusalCacheMs 0 or refusalCacheSize 0: every call is asked', async (t) => {
  for (const options of [{ refusalCacheMs: 0 }, { refusalCacheSize: 0 }]) {
    const { fake, client } = await setup(t, () => overResponse(), options);
    for (let i = 0; i < 5; i++) {
      const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
      assert.deepEqual([d.allowed, d.local], [false, false]);
    }
    assert.equal(fake.requests.length, 5, JSON.stringify(options));
    assert.equal(client.localRefusals, 0);
  }
});

test('not remembered: allowed, a refusal without retry-after, the failure policy', async (t) => {
  const { fake, client } = await setup(t, (req) => {
    if (req.domain === 'ok') return okResponse();
    if (req.domain === 'zero') return { code: pb.Code.CODE_OVER_LIMIT, statuses: [{ code: pb.Code.CODE_OVER_LIMIT }] };
    throw { code: grpc.status.UNAVAILABLE, details: 'down' };
  }, { failClosed: true });
  for (const domain of ['ok', 'zero', 'down']) {
    for (let i = 0; i < 2; i++) assert.equal((await client.shouldRateLimit(domain, [D('k', 'v')])).local, false, domain);
  }
  assert.equal(fake.requests.length, 6);
  assert.equal(client.localRefusals, 0);
  assert.equal(client.failures, 2);
});

test('the memory is bounded, and forgets expired refusals before live ones', async (t) => {
  // user values starting with "s" are refused for 400 ms, the others for 12.1 s.
  const { fake, client, clock } = await setup(t, (req) => (req.descriptors[0].entries[0].value.startsWith('s') ? refusing(400) : overResponse()), {
    refusalCacheSize: 3,
  });
  const ask = async (user) => (await client.shouldRateLimit('api', [D('user', user)])).local;
  for (const u of ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j']) assert.equal(await ask(u), false);
  // The last three are remembered, and only they.
  for (const u of ['h', 'i', 'j']) assert.equal(await ask(u), true, u);
  let rpcs = fake.requests.length;
  assert.equal(await ask('a'), false, 'a was forgotten');
  assert.equal(fake.requests.length, rpcs + 1);

  // Now [i, j, a] (h evicted). 1.5 s on, all expired: short ones join.
  clock.now = 1500;
  assert.equal(await ask('L1'), false);
  assert.equal(await ask('s1'), false);
  assert.equal(await ask('s2'), false);
  // [L1, s1, s2] at 1.5 s; at 2 s s1 and s2 have expired, L1, the oldest,
  // has not: a new refusal takes their room, not L1's.
  clock.now = 2000;
  assert.equal(await ask('L2'), false);
  rpcs = fake.requests.length;
  assert.equal(await ask('L1'), true, 'a live refusal was evicted while expired ones were kept');
  assert.equal(await ask('L2'), true);
  assert.equal(fake.requests.length, rpcs);

  // Full of live refusals: the oldest goes.
  assert.equal(await ask('L3'), false);
  assert.equal(await ask('L4'), false);
  rpcs = fake.requests.length;
  for (const u of ['L2', 'L3', 'L4']) assert.equal(await ask(u), true, u);
  assert.equal(fake.requests.length, rpcs);
  assert.equal(await ask('L1'), false, 'the oldest was evicted');
});

test('the hook sees local decisions; callers cannot change what is remembered', async (t) => {
  const seen = [];
  const { client, clock } = await setup(t, () => overResponse(), { onDecision: (d, info) => seen.push([d.local, info.domain]) });
  const first = await client.shouldRateLimit('edge', [D('k', 'v')]);
  first.statuses[0].limit.name = 'changed';
  first.headers[0].value = 'changed';
  first.headers.pop();
  clock.now = 10;
  const d = await client.shouldRateLimit('edge', [D('k', 'v')]);
  d.statuses[0].remaining = 99;
  const d2 = await client.shouldRateLimit('edge', [D('k', 'v')]);
  for (const x of [d, d2]) {
    assert.equal(x.local, true);
    assert.equal(x.statuses[0].limit.name, 'per_ip');
    assert.equal(x.headers[0].value, '"per_ip";q=2;w=60');
    assert.equal(x.headers.length, 3);
  }
  assert.equal(d2.statuses[0].remaining, 0);
  assert.deepEqual(seen, [[false, 'edge'], [true, 'edge'], [true, 'edge']]);
});

test('refusalKey: requests that differ never share a key', () => {
  const distinct = [
    ['a', [D('b_c', 'd')]],
    ['a_b', [D('c', 'd')]],
    ['a', [D('b', 'c_d')]],
    ['a', [D('b', 'c', 'd', '')]],
    ['a', [D('b', 'c'), D('d', '')]],
    ['a', [D('b', ''), D('c', 'd')]],
    ['a', [with_(D('b', 'c'), { hits: 2 })]],
    ['a', [with_(D('b', 'c'), { checkOnly: true })]],
    ['a', [with_(D('b', 'c'), { limit: { requests: 1, windowMs: 1000 } })]],
    ['a', [with_(D('b', 'c'), { limit: { requests: 1, windowMs: 1000.001 } })]],
    ['a', [with_(D('b', 'c'), { limit: { requests: 2, windowMs: 1000 } })]],
    ['a', [D('b', 'c')]],
    ['a', [D('b', '1:c')]],
    ['a', [D('b', '\u00e9')]],
    ['a', [D('b', Buffer.from([0xe9]))]],
  ];
  const seen = new Map();
  distinct.forEach(([domain, ds], i) => {
    const k = refusalKey(domain, ds);
    assert.equal(seen.has(k), false, `requests ${seen.get(k)} and ${i} share a key`);
    seen.set(k, i);
  });
  // A long value is keyed by its digest, as ratelimitd counts it.
  const long1 = refusalKey('a', [D('b', 'x'.repeat(2 << 20))]);
  const long2 = refusalKey('a', [D('b', `${'x'.repeat((2 << 20) - 1)}y`)]);
  assert.ok(long1.length < 64, `key of a 2 MiB value: ${long1.length} bytes`);
  assert.notEqual(long1, long2);
  assert.equal(long1, refusalKey('a', [D('b', Buffer.from('x'.repeat(2 << 20)))]));
  assert.ok(refusalKey('a', [D('b', 'x'.repeat(1024))]).length > 1024, 'a 1024-byte value is keyed as it is');
  // The 1024-byte bound is in bytes of UTF-8, for strings as for bytes.
  for (const v of ['\u00e9'.repeat(512), '\u00e9'.repeat(513), '\u20ac'.repeat(341), '\u20ac'.repeat(342)]) {
    assert.equal(refusalKey('a', [D('b', v)]), refusalKey('a', [D('b', Buffer.from(v))]), `${Buffer.byteLength(v)} bytes`);
    assert.equal(refusalKey('a', [D('b', v)]).length < 64, Buffer.byteLength(v) > 1024, `${Buffer.byteLength(v)} bytes`);
  }
  for (const k of seen.keys()) assert.notEqual(k, long1);
  // Hits absent, 0 and 1 are one hit.
  const one = refusalKey('a', [D('b', 'c')]);
  assert.equal(refusalKey('a', [with_(D('b', 'c'), { hits: 0 })]), one);
  assert.equal(refusalKey('a', [with_(D('b', 'c'), { hits: 1 })]), one);
});

test('localHeaders counts Retry-After, RateLimit t and RateLimit-Reset down, and nothing else', () => {
  const s = 1000;
  const ietf = [
    { name: 'RateLimit-Policy', value: '"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600' },
    { name: 'RateLimit', value: '"a";r=0;t=60, "b";r=3;t=10, "c";r=4;t=3600' },
    { name: 'Retry-After', value: '60' },
  ];
  const legacy = [
    { name: 'RateLimit-Limit', value: '2' },
    { name: 'RateLimit-Remaining', value: '0' },
    { name: 'RateLimit-Reset', value: '60' },
  ];
  const h = (name, value) => ({ name, value });
  const cases = [
    ['empty', [], 20 * s, 40 * s, []],
    ['ietf, at once', ietf, 0, 60 * s, ietf],
    ['ietf, under a second', ietf, 999, 60 * s - 999, ietf],
    ['ietf, +20.3s', ietf, 20 * s + 300, 40 * s - 300, [ietf[0], h('RateLimit', '"a";r=0;t=40, "b";r=3;t=0, "c";r=4;t=3580'), h('Retry-After', '40')]],
    ['Retry-After at least 1', ietf, 59 * s + 900, 100, [ietf[0], h('RateLimit', '"a";r=0;t=1, "b";r=3;t=0, "c";r=4;t=3541'), h('Retry-After', '1')]],
    ['names in any case', [h('ratelimit', '"a";r=0;t=60'), h('retry-after', '60')], 30 * s, 30 * s, [h('ratelimit', '"a";r=0;t=30'), h('retry-after', '30')]],
    ['items without t', [h('RateLimit', '"a";r=0, "b";r=1;t=30, "c", "d";t=5;r=2')], 10 * s, 0, [h('RateLimit', '"a";r=0, "b";r=1;t=20, "c", "d";t=0;r=2')]],
    ['legacy', legacy, 45 * s, 15 * s, [legacy[0], legacy[1], h('RateLimit-Reset', '15')]],
    ['Retry-After as a date', [h('Retry-After', 'Wed, 21 Oct 2015 07:28:00 GMT')], 10 * s, 10 * s, [h('Retry-After', 'Wed, 21 Oct 2015 07:28:00 GMT')]],
    ['other headers', [h('X-Reset', '60'), h('RateLimit-Policy', '"a";q=2;w=60;t=60')], 10 * s, 10 * s, [h('X-Reset', '60'), h('RateLimit-Policy', '"a";q=2;w=60;t=60')]],
  ];
  for (const [name, hs, elapsed, retry, want] of cases) {
    const before = JSON.stringify(hs);
    const got = localHeaders(hs, elapsed, retry);
    assert.deepEqual(got, want, name);
    assert.equal(JSON.stringify(hs), before, `${name}: modified its argument`);
    if (got.length > 0) assert.notEqual(got[0], hs[0], `${name}: shares a header with its argument`);
  }
});

test('countDownT lowers exactly the t Integer parameters of top-level members', () => {
  const cases = [
    ['"a";r=0;t=45', 5, '"a";r=0;t=40'],
    ['"a";r=0;t=45', 45, '"a";r=0;t=0'],
    ['"a";r=0;t=45', 100, '"a";r=0;t=0'],
    ['"a";r=0;t=45', 0, '"a";r=0;t=45'],
    ['"a";r=0;t=0', 10, '"a";r=0;t=0'],
    ['"a";r=0;t=100, "b";r=5, "c";t=7;r=1, "d"', 10, '"a";r=0;t=90, "b";r=5, "c";t=0;r=1, "d"'],
    ['"a";t=1000000000000000', 1, '"a";t=1000000000000000'], // 16 digits: not an Integer
    ['"a";t=999999999999999', 1, '"a";t=999999999999998'],
    ['"a";t=050', 20, '"a";t=30'],
    ['"a"; t=50', 20, '"a"; t=30'],
    ['"a";t=50,"b";t=60', 20, '"a";t=30,"b";t=40'],
    ['"a";t=50\t,\t"b";t=60', 20, '"a";t=30\t,\t"b";t=40'],
    // Not t, or not a non-negative Integer: unchanged.
    ['"a";tt=50;at=50;t', 20, '"a";tt=50;at=50;t'],
    ['"a";t=-5;u=1', 20, '"a";t=-5;u=1'],
    ['"a";t=4.5', 20, '"a";t=4.5'],
    ['"a";t=?1', 20, '"a";t=?1'],
    ['"a";t="50"', 20, '"a";t="50"'],
    ['"a";t=t50', 20, '"a";t=t50'],
    // t inside Strings, escaped quotes and all: unchanged.
    ['"x;t=50";t=50', 20, '"x;t=50";t=30'],
    ['"x\\";t=50\\\\";t=50, "y\\\\";t=9', 5, '"x\\";t=50\\\\";t=45, "y\\\\";t=4'],
    ['"a";s="b;t=50";t=50', 20, '"a";s="b;t=50";t=30'],
    // Tokens, Byte Sequences, Display Strings, inner lists.
    ['a/b:c;t=50', 20, 'a/b:c;t=30'],
    [':dDs1MA==:;t=50', 20, ':dDs1MA==:;t=30'],
    ['%"t;t=%22";t=50', 20, '%"t;t=%22";t=30'],
    ['("a";t=50 "b";t=60);t=70, "c";t=80', 20, '("a";t=50 "b";t=60);t=50, "c";t=60'],
  ];
  for (const [v, secs, want] of cases) assert.equal(countDownT(v, secs), want, `countDownT(${v}, ${secs})`);
});
