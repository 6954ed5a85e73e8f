'use strict';
// The quota mode against an RLQS server in this process (real gRPC on
// loopback) that records the reports and answers by a script, with the
// Quota's clock driven by hand: token buckets, times to live, blanket
// rules, abandon, the bucket bound, reconnection, bytes in bucket ids.

const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { BinaryReader, BinaryWriter } = require('@bufbuild/protobuf/wire');
const { setTimeout: sleep } = require('node:timers/promises');
const { Quota, D, RateLimitError, NoAssignmentError, rlqsV3 } = require('..');
const { internal } = require('../lib/quota.js');

const { Tokens, utf8Codec, METHOD } = internal;
const quiet = { warn() {}, error() {} };

/** tokenBucket is a BucketAction assigning a token bucket for ttlMs. */
function tokenBucket(bucket, max, perFill, fillMs, ttlMs) {
  return {
    bucketId: { bucket },
    quotaAssignmentAction: {
      assignmentTimeToLive: ms(ttlMs),
      rateLimitStrategy: { tokenBucket: { maxTokens: max, tokensPerFill: perFill, fillInterval: ms(fillMs) } },
    },
  };
}

/** blanket is a BucketAction assigning rule (0 ALLOW_ALL, 1 DENY_ALL) for ttlMs. */
function blanket(bucket, rule, ttlMs) {
  return { bucketId: { bucket }, quotaAssignmentAction: { assignmentTimeToLive: ms(ttlMs), rateLimitStrategy: { blanketRule: rule } } };
}

function ms(x) {
  return { seconds: Math.floor(x / 1000), nanos: (x % 1000) * 1e6 };
}

/**
 * startRLQS serves RLQS on a free loopback port: each report is pushed
 * to reports (with its stream's number, from 1) and answered with
 * answer(usage)'s actions when answer is set; push(actions) sends on the
 * latest stream; the first fail streams fail at once. Stopped after t.
 */
async function startRLQS(t, { answer = null, fail = 0 } = {}) {
  const reports = [];
  const waiters = [];
  const ended = [];
  let streams = 0;
  let latest = null;
  const server = new grpc.Server();
  server.register(
    METHOD,
    (call) => {
      const n = ++streams;
      call.on('end', () => ended.push(n));
      call.on('cancelled', () => ended.push(n));
      call.on('error', () => {});
      if (n <= fail) {
        call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'failing on purpose' });
        return;
      }
      latest = call;
      call.on('data', (r) => {
        r.stream = n;
        reports.push(r);
        for (const w of waiters.splice(0)) w();
        if (!answer) return;
        const actions = r.bucketQuotaUsages.map(answer).filter(Boolean);
        if (actions.length > 0) call.write({ bucketAction: actions });
      });
    },
    (msg) => Buffer.from(rlqsV3.RateLimitQuotaResponse.encode(msg, new BinaryWriter(utf8Codec.encode)).finish()),
    (buf) => rlqsV3.RateLimitQuotaUsageReports.decode(new BinaryReader(buf, utf8Codec.decode)),
    'bidi',
  );
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });
  t.after(() => server.forceShutdown());
  let read = 0;
  return {
    addr: `127.0.0.1:${port}`,
    ended,
    /** next resolves to the next report not yet read. */
    async next() {
      for (const deadline = Date.now() + 30000; read >= reports.length; ) {
        if (Date.now() > deadline) assert.fail('no report in 30 s');
        await new Promise((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 100);
        });
      }
      return reports[read++];
    },
    push(actions) {
      latest.write({ bucketAction: actions });
    },
  };
}

/** quota returns a Quota of domain edge on addr, closed after t. */
function quota(t, addr, options = {}) {
  const q = new Quota(addr, { domain: 'edge', logger: quiet, ...options });
  t.after(() => q.close());
  return q;
}

/** until waits for cond, 30 s at most. */
async function until(what, cond) {
  for (const deadline = Date.now() + 30000; !cond(); await sleep(2)) {
    if (Date.now() > deadline) assert.fail(`${what}: not in 30 s`);
  }
}

/** assigned reports whether an assignment (not the failure policy) decides d, asking with checkOnly. */
async function assigned(q, d) {
  return (await q.shouldRateLimit(q.domain, [{ ...d, checkOnly: true }])).error === null;
}

test('a token bucket fills at whole fills, up to its max, and tells its next fill', () => {
  const tb = new Tokens(5, 2, 1000, 0, 5);
  const steps = [
    [0, 5, 0],
    [0, 1, 1000],
    [500, 1, 500],
    [1000, 2, 0],
    [1000, 1, 1000],
    [2500, 3, 500], // 2 tokens at 2 s
    [2500, 2, 0],
    [100000, 6, 1000], // full at 5, never 6
    [100000, 5, 0],
    [103000, 5, 0], // 3 fills of 2, capped at 5
  ];
  steps.forEach(([at, n, want], i) => assert.equal(tb.take(n, at), want, `step ${i}: take(${n}) at ${at} ms`));
  tb.refund(9);
  assert.equal(tb.tokens, 5, 'a refund past max');
});

for (const failClosed of [false, true]) {
  test(`a token bucket decides until its time to live ends, then the failure policy (${failClosed ? 'closed' : 'open'})`, async (t) => {
    let now = 1000;
    const f = await startRLQS(t, { answer: (u) => tokenBucket(u.bucketId.bucket, 2, 1, 1000, 10000) });
    const q = quota(t, f.addr, { failClosed, reportingIntervalMs: 3600000, clock: () => now });
    const d = D('k', 'v');
    const first = await q.shouldRateLimit('edge', [d]);
    assert.equal(first.allowed, !failClosed);
    assert.ok(first.error instanceof NoAssignmentError && first.error.code === 14);
    assert.equal(q.failOpens, failClosed ? 0 : 1);
    let r = await f.next();
    assert.equal(r.domain, 'edge', "the first report names the domain");
    while (r.bucketQuotaUsages.length === 0) r = await f.next();
    assert.deepEqual({ ...r.bucketQuotaUsages[0].bucketId.bucket }, { k: 'v' });
    assert.deepEqual(r.bucketQuotaUsages[0].timeElapsed, ms(3600000), 'a first report gives the interval');
    await until('the assignment', () => q._buckets.values().next().value.a !== null);
    const got = [q.allow([d]), q.allow([d]), q.allow([d])];
    now += 1000;
    got.push(q.allow([d]), q.allow([d]));
    assert.deepEqual(got, [true, true, false, true, false]);
    const refused = await q.shouldRateLimit('edge', [d]);
    assert.deepEqual([refused.allowed, refused.retryAfterMs, refused.error, refused.statuses[0].overLimit], [false, 1000, null, true]);
    now += 10000;
    assert.equal(q.allow([d]), !failClosed, 'after the time to live: the failure policy');
  });
}

test('a call is allowed only when every bucket admits it; a refused call takes no token', async (t) => {
  const f = await startRLQS(t, {
    answer: (u) => {
      const b = u.bucketId.bucket;
      if (b.deny) return blanket(b, 1, 60000);
      if (b.allow) return blanket(b, 0, 60000);
      return tokenBucket(b, 1, 1, 3600000, 60000);
    },
  });
  const q = quota(t, f.addr, { failClosed: true, reportingIntervalMs: 3600000 });
  const one = D('one', 'x');
  const deny = D('deny', 'x');
  const all = D('allow', 'x');
  q.allow([one, deny, all]);
  await until('three assignments', () => q._buckets.size === 3 && [...q._buckets.values()].every((b) => b.a));
  assert.deepEqual([q.allow([one, deny]), q.allow([all, one]), q.allow([one]), q.allow([all]), q.allow([deny])], [false, true, false, true, false]);
});

test('malformed calls and options are RateLimitErrors with code 3', async (t) => {
  const f = await startRLQS(t);
  const q = quota(t, f.addr);
  for (const [name, ds] of Object.entries({
    none: [],
    'not an array': undefined,
    'no entries': [{ entries: [] }],
    'repeated key': [D('a', '1', 'b', '2', 'a', '3')],
    'empty key': [D('', '1')],
    'ill-formed key': [D('\uD800', '1')],
    override: [{ entries: [{ key: 'a', value: '1' }], limit: { requests: 1, windowMs: 1000 } }],
    'too many': new Array(65).fill(D('a', '1')),
    'second is bad': [D('a', '1'), D('b', '1', 'b', '1')],
    'a value neither string nor bytes': [{ entries: [{ key: 'a', value: 1 }] }],
  })) {
    assert.throws(() => q.allow(ds), (err) => err instanceof RateLimitError && err.code === 3, name);
  }
  await assert.rejects(q.shouldRateLimit('other', [D('a', '1')]), (err) => err instanceof RateLimitError && err.code === 3);
  for (const o of [{}, { domain: 'd', reportingIntervalMs: -1 }, { domain: 'd', maxBuckets: -1 }, { domain: 'd', maxBuckets: 1.5 }]) {
    assert.throws(() => new Quota(f.addr, o), RateLimitError, JSON.stringify(o));
  }
});

test('a bucket id is a map; past maxBuckets the failure policy decides, and overflows counts it', async (t) => {
  const f = await startRLQS(t, { answer: (u) => blanket(u.bucketId.bucket, 0, 60000) });
  const q = quota(t, f.addr, { failClosed: true, reportingIntervalMs: 3600000, maxBuckets: 2 });
  q.allow([D('a', '1', 'b', '2'), D('a', '2', 'b', '1')]);
  await until('two assignments', () => [...q._buckets.values()].filter((b) => b.a).length === 2);
  assert.deepEqual([q.allow([D('b', '2', 'a', '1')]), q.allow([D('c', '1')]), q.allow([D('b', '1', 'a', '2')])], [true, false, true]);
  assert.equal(q.size, 2);
  assert.equal(q.overflows, 1);
});

test('an abandoned bucket is forgotten, and reported afresh at its next use', async (t) => {
  const f = await startRLQS(t);
  const q = quota(t, f.addr, { reportingIntervalMs: 3600000 });
  const d = D('k', 'v');
  q.allow([d]);
  for (let r = await f.next(); r.bucketQuotaUsages.length === 0; r = await f.next());
  f.push([blanket({ k: 'v' }, 1, 60000)]);
  await until('DENY_ALL', () => !q.allow([d]));
  f.push([{ bucketId: { bucket: { k: 'v' } }, abandonAction: {} }]);
  await until('abandoned', () => q.size === 0);
  assert.equal(q.allow([d]), true, 'an abandoned bucket: the failure policy, open');
  const r = await f.next();
  assert.deepEqual(r.bucketQuotaUsages.map((u) => ({ ...u.bucketId.bucket })), [{ k: 'v' }]);
});

test('after failed streams the Quota reconnects, names the domain again and reports each interval; idle buckets are forgotten', async (t) => {
  const f = await startRLQS(t, { fail: 2 });
  const q = quota(t, f.addr, { reportingIntervalMs: 20 });
  q.allow([D('k', 'v')]);
  const r = await f.next();
  assert.deepEqual([r.stream, r.domain], [3, 'edge']);
  const d = D('k', 'w');
  for (let i = 0; i < 5; i++) q.allow([d]);
  let allowed = 0;
  while (allowed < 5) {
    for (const u of (await f.next()).bucketQuotaUsages) if (u.bucketId.bucket.k === 'w') allowed += u.numRequestsAllowed;
  }
  assert.equal(allowed, 5);
  await until('the idle buckets forgotten', () => q.size === 0);
});

test('bucket ids carry any bytes, both ways', async (t) => {
  const bytes = new Uint8Array([0xff, 0x00, 0x76]);
  const f = await startRLQS(t, { answer: (u) => blanket(u.bucketId.bucket, 1, 60000) });
  const q = quota(t, f.addr, { reportingIntervalMs: 3600000 });
  const d = { entries: [{ key: 'k', value: bytes }, { key: 'ключ', value: 'значение' }] };
  q.allow([d]);
  let r = await f.next();
  while (r.bucketQuotaUsages.length === 0) r = await f.next();
  const got = r.bucketQuotaUsages[0].bucketId.bucket;
  assert.deepEqual(utf8Codec.encode(got.k), Buffer.from(bytes), 'the bytes as sent');
  assert.equal(got['ключ'], 'значение');
  await until('DENY_ALL for the bytes', () => !q.allow([d]));
  assert.equal(q.allow([{ entries: [{ key: 'k', value: 'v' }, { key: 'ключ', value: 'значение' }] }]), true, 'another value: another bucket');
});

test('close ends the stream', async (t) => {
  const f = await startRLQS(t);
  const q = new Quota(f.addr, { domain: 'edge', logger: quiet });
  await f.next();
  q.close();
  await until('the server sees the stream end', () => f.ended.length > 0);
  q.close();
});
