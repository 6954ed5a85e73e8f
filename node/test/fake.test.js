'use strict';
// FakeRateLimiter: scripted answers, recorded calls, Client-like
// validation, and the middleware driven by it as by a Client.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { FakeRateLimiter, D, middleware, RateLimitError } = require('..');

/** checkout is code under test: it depends on a RateLimiter, not a Client. */
async function checkout(rl, user) {
  const d = await rl.shouldRateLimit('shop', [D('user', user)]);
  return d.allowed ? 'ok' : `busy, retry in ${d.retryAfterMs} ms`;
}

test('a FakeRateLimiter answers by its script and records the calls', async () => {
  const f = new FakeRateLimiter();
  f.push(FakeRateLimiter.allow(), FakeRateLimiter.refuse(30000));
  assert.deepEqual([await checkout(f, 'u1'), await checkout(f, 'u1'), await checkout(f, 'u1')], ['ok', 'busy, retry in 30000 ms', 'ok']);
  assert.deepEqual(
    f.calls.map((c) => [c.domain, c.descriptors[0].entries[0].value, c.decision.allowed]),
    [['shop', 'u1', true], ['shop', 'u1', false], ['shop', 'u1', true]],
  );
  await assert.rejects(f.shouldRateLimit('', [D('a', 'b')]), (err) => err instanceof RateLimitError && err.code === 3);
  f.setDefault(FakeRateLimiter.failClosed());
  const d = await f.shouldRateLimit('shop', [D('a', 'b')]);
  assert.equal(d.allowed, false);
  assert.ok(d.error instanceof RateLimitError && d.error.code === 14);
  f.reset();
  assert.equal(f.calls.length, 0);
});

test('the middleware takes a FakeRateLimiter', async (t) => {
  const f = new FakeRateLimiter();
  f.setDefault(FakeRateLimiter.refuse(60000));
  const mw = middleware(f, 'web');
  const server = http.createServer((req, res) => mw(req, res, () => res.end('ok')));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  const res = await new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port: server.address().port, path: '/items/1' }, (r) => {
      r.resume();
      r.on('end', () => resolve(r));
    }).on('error', reject);
  });
  assert.deepEqual([res.statusCode, res.headers['retry-after']], [429, '60']);
  assert.deepEqual(f.calls[0].descriptors.map((d) => d.entries.map((e) => e.key)), [['remote_address'], ['path', 'method']]);
});
