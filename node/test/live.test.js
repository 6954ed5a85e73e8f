'use strict';
// Live checks against a real ratelimitd, when RATELIMITD_BIN names its
// binary (make test sets it; .ci/test-node runs this): both gRPC APIs
// through the generated stubs, the package's Client and middleware, and
// examples/node/client.js. Each run starts its own daemon on free loopback
// ports with test/rules.yaml (and one with examples/config.yaml for the
// example), reading the gRPC address from its JSON log.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const { Client, D, middleware, ratelimitV1, envoyRatelimitV3 } = require('..');

const { BIN, startDaemon } = require('./daemon.js');
const REPO = path.join(__dirname, '..', '..');
const DOMAIN = 'conformance';
const LIMIT = 2;

/** unary calls a generated stub's method as a promise, with 5 s to answer. */
function unary(client, method, req) {
  return new Promise((resolve, reject) => {
    client[method](req, new grpc.Metadata(), { deadline: new Date(Date.now() + 5000) }, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

/** ms converts a Duration to milliseconds. */
function ms(d) {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

const run = `${process.pid}-${Date.now()}`;

test('live ratelimitd', { skip: BIN ? false : 'RATELIMITD_BIN is not set' }, async (t) => {
  const addr = await startDaemon(t, path.join(__dirname, 'rules.yaml'));

  await t.test('native API (ratelimit.v1) through the generated stub', async () => {
    const rls = new ratelimitV1.RateLimitServiceClient(addr, grpc.credentials.createInsecure());
    try {
      const req = ratelimitV1.ShouldRateLimitRequest.fromPartial({
        domain: DOMAIN,
        descriptors: [{ entries: [{ key: 'user', value: `native-${run}` }] }],
      });
      for (let i = 0; i <= LIMIT; i++) {
        const resp = await unary(rls, 'shouldRateLimit', req);
        const st = resp.statuses[0];
        if (i < LIMIT) {
          assert.equal(resp.code, ratelimitV1.Code.CODE_OK, `call ${i + 1}`);
          assert.equal(st.remaining, LIMIT - 1 - i);
        } else {
          assert.equal(resp.code, ratelimitV1.Code.CODE_OVER_LIMIT);
          assert.equal(st.code, ratelimitV1.Code.CODE_OVER_LIMIT);
          assert.deepEqual([st.limit.requests, ms(st.limit.window)], [LIMIT, 60000]);
          assert.ok(ms(st.retryAfter) > 0);
          assert.ok(resp.headers.some((h) => h.name.toLowerCase() === 'retry-after'));
        }
      }
    } finally {
      rls.close();
    }
  });

  await t.test("Envoy's API (envoy.service.ratelimit.v3) through the generated stub", async () => {
    const { RateLimitResponse_Code: Code, RateLimitResponse_RateLimit_Unit: Unit } = envoyRatelimitV3;
    const rls = new envoyRatelimitV3.RateLimitServiceClient(addr, grpc.credentials.createInsecure());
    try {
      const req = envoyRatelimitV3.RateLimitRequest.fromPartial({
        domain: DOMAIN,
        descriptors: [{ entries: [{ key: 'user', value: `envoy-${run}` }] }],
      });
      for (let i = 0; i <= LIMIT; i++) {
        const resp = await unary(rls, 'shouldRateLimit', req);
        const want = i < LIMIT ? Code.OK : Code.OVER_LIMIT;
        const st = resp.statuses[0];
        assert.equal(resp.overallCode, want, `call ${i + 1}`);
        assert.equal(st.code, want);
        assert.deepEqual([st.currentLimit.requestsPerUnit, st.currentLimit.unit], [LIMIT, Unit.MINUTE]);
        if (i < LIMIT) assert.equal(st.limitRemaining, LIMIT - 1 - i);
      }
    } finally {
      rls.close();
    }
  });

  await t.test('the Client: decisions, limit override, UNIMPLEMENTED warning stays silent', async () => {
    const warnings = [];
    const client = new Client(addr, { timeoutMs: 5000, logger: { warn: (m) => warnings.push(m), error: (m) => warnings.push(m) } });
    try {
      await client.waitForReady();
      const ds = [D('user', `client-${run}`)];
      const got = [];
      for (let i = 0; i <= LIMIT; i++) got.push(await client.shouldRateLimit(DOMAIN, ds));
      assert.deepEqual(got.map((d) => [d.allowed, d.error]), [[true, null], [true, null], [false, null]]);
      const refused = got[LIMIT];
      assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 60000);
      assert.equal(refused.statuses[0].limit.algorithm, 'sliding_log');
      // Asked again at once: refused, by the Client's memory unless over 1 s passed.
      const again = await client.shouldRateLimit(DOMAIN, ds);
      assert.equal(again.allowed, false);
      assert.equal(client.localRefusals, again.local ? 1 : 0);
      // A per-request override: 1 request per hour for a fresh user.
      const over = { entries: [{ key: 'user', value: `override-${run}` }], limit: { requests: 1, windowMs: 3600000 } };
      const a = await client.shouldRateLimit(DOMAIN, [over]);
      const b = await client.shouldRateLimit(DOMAIN, [over]);
      assert.deepEqual([a.allowed, b.allowed], [true, false]);
      assert.deepEqual([b.statuses[0].limit.requests, b.statuses[0].limit.windowMs], [1, 3600000]);
      // The bounds the Client accepts, ratelimitd accepts too.
      for (const windowMs of [1, 1.001, 100 * 365 * 86400e3]) {
        const edge = await client.shouldRateLimit(DOMAIN, [{ entries: [{ key: 'user', value: `bounds-${windowMs}-${run}` }], limit: { requests: 5, windowMs } }]);
        assert.deepEqual([edge.allowed, edge.error, edge.statuses[0].limit.windowMs], [true, null, windowMs], `windowMs ${windowMs}`);
      }
      // checkOnly consumes nothing.
      const c = await client.shouldRateLimit(DOMAIN, [{ entries: [{ key: 'user', value: `check-${run}` }], checkOnly: true }]);
      assert.equal(c.statuses[0].remaining, LIMIT);
      assert.equal(client.failOpens, 0);
      assert.deepEqual(warnings, []);
    } finally {
      client.close();
    }
  });

  await t.test('the middleware: headers, then 429', async (t2) => {
    const client = new Client(addr, { timeoutMs: 5000 });
    t2.after(() => client.close());
    const mw = middleware(client, DOMAIN, { descriptors: (req) => [D('user', `${req.headers['x-user']}-${run}`)] });
    const server = http.createServer((req, res) => mw(req, res, () => res.end('ok')));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    t2.after(() => new Promise((resolve) => server.close(resolve)));
    const statuses = [];
    let last;
    for (let i = 0; i <= LIMIT; i++) {
      last = await new Promise((resolve, reject) => {
        http
          .get({ port: server.address().port, host: '127.0.0.1', headers: { 'X-User': 'mw' }, agent: false }, (res) => {
            let body = '';
            res.on('data', (c) => (body += c));
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
          })
          .on('error', reject);
      });
      statuses.push(last.status);
      assert.ok(last.headers.ratelimit, 'the RateLimit header ratelimitd sent');
      assert.ok(last.headers['ratelimit-policy'], 'the RateLimit-Policy header ratelimitd sent');
    }
    assert.deepEqual(statuses, [200, 200, 429]);
    assert.equal(last.headers['content-type'], 'application/problem+json');
    assert.ok(Number(last.headers['retry-after']) >= 1);
    assert.equal(JSON.parse(last.body).status, 429);
  });

  await t.test('examples/node/client.js against examples/config.yaml', async (t2) => {
    const exampleAddr = await startDaemon(t2, path.join(REPO, 'examples', 'config.yaml'));
    // The example requires 'ratelimitd': resolve it to this package.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimitd-example-'));
    t2.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    fs.symlinkSync(path.join(__dirname, '..'), path.join(dir, 'ratelimitd'), 'dir');
    const out = await new Promise((resolve, reject) => {
      execFile(process.execPath, [path.join(REPO, 'examples', 'node', 'client.js'), exampleAddr], { env: { ...process.env, NODE_PATH: dir }, timeout: 30000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
      );
    });
    const lines = out.trim().split('\n');
    assert.equal(lines.length, 7, out);
    for (let i = 0; i < 5; i++) assert.match(lines[i], new RegExp(`^login ${i + 1}: allowed, ${4 - i} left$`));
    assert.match(lines[5], /^login 6: refused, retry in \d+ s$/);
    // Locally unless more than the refusal memory's 1 s passed since login 6.
    assert.match(lines[6], /^login 7: refused( locally)?, retry in \d+ s$/);
  });
});
