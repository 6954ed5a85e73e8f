'use strict';
// The middleware on a real node:http server, asking an in-process gRPC
// server of the native API.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { EventEmitter } = require('node:events');
const grpc = require('@grpc/grpc-js');
const { Client, D, middleware, clientIP, QUOTA_EXCEEDED } = require('..');
const { startFake, okResponse, overResponse } = require('./helpers.js');

/**
 * serve starts a node:http server on host whose handler runs mw, then
 * answers 200 "hello". It returns the base URL.
 */
async function serve(t, mw, host = '127.0.0.1') {
  const server = http.createServer((req, res) => {
    mw(req, res, () => {
      res.setHeader('Content-Type', 'text/plain');
      res.end('hello');
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const { port } = server.address();
  return host.includes(':') ? `http://[${host}]:${port}` : `http://${host}:${port}`;
}

/** get makes a request and returns its status, headers and body. */
function get(url, headers = {}, method = 'GET') {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, raw: res.rawHeaders, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** quiet is a logger keeping its lines. */
function quiet() {
  const lines = { warn: [], error: [] };
  return { lines, warn: (m) => lines.warn.push(m), error: (m) => lines.error.push(m) };
}

/** setup starts a fake ratelimitd answering answer, and a Client of it. */
async function setup(t, answer, options = {}) {
  const fake = await startFake(answer);
  t.after(() => fake.stop());
  const client = new Client(fake.addr, { timeoutMs: 5000, ...options });
  t.after(() => client.close());
  return { fake, client };
}

/** entries returns the descriptors of a request as arrays of "key=value". */
function entries(req) {
  return req.descriptors.map((d) => d.entries.map((e) => `${e.key}=${e.rawValue.length ? `raw:${Buffer.from(e.rawValue).toString('hex')}` : e.value}`));
}

test('allowed: the default descriptors, the headers ratelimitd sent, and next', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const url = await serve(t, middleware(client, 'edge'));
  const res = await get(`${url}/items/%FF/x?q=1`, { 'X-Forwarded-For': '203.0.113.9' }, 'POST');
  assert.equal(res.status, 200);
  assert.equal(res.body, 'hello');
  assert.equal(res.headers['ratelimit-policy'], '"per_ip";q=10;w=60');
  assert.equal(res.headers.ratelimit, '"per_ip";r=9;t=43');
  assert.equal(res.headers['retry-after'], undefined);
  assert.equal(res.headers['x-ratelimit-limit'], undefined);
  // No proxy trusted: the header is not read. The path is decoded, as
  // Go's URL.Path, and sent as bytes when not UTF-8.
  assert.deepEqual(entries(fake.requests[0]), [
    ['remote_address=127.0.0.1'],
    ['path=raw:2f6974656d732fff2f78', 'method=POST'],
  ]);
  assert.equal(fake.requests[0].domain, 'edge');
});

test('refused: 429, Retry-After, problem+json as the Go middleware writes them', async (t) => {
  const { client } = await setup(t, () => overResponse());
  let called = false;
  const mw = middleware(client, 'edge');
  const url = await serve(t, (req, res, next) => mw(req, res, () => {
    called = true;
    next();
  }));
  const res = await get(`${url}/`);
  assert.equal(res.status, 429);
  assert.equal(called, false);
  assert.equal(res.headers['retry-after'], '13', '12.1 s rounded up; not the server\'s Retry-After');
  assert.equal(res.headers['content-type'], 'application/problem+json');
  assert.equal(res.headers['x-content-type-options'], 'nosniff');
  assert.equal(res.headers['ratelimit-policy'], '"per_ip";q=2;w=60');
  assert.equal(res.headers.ratelimit, '"per_ip";r=0;t=30');
  assert.equal(
    res.body,
    `{"type":"${QUOTA_EXCEEDED}","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Too many requests; retry in 13 s.","violated-policies":["per_ip"]}\n`,
  );
});

test("refused again: the Client's memory answers, without an RPC, its headers counted down", async (t) => {
  const clock = { now: 0 };
  const { fake, client } = await setup(t, () => overResponse(), { refusalCacheMs: 5000, clock: () => clock.now });
  const url = await serve(t, middleware(client, 'edge'));
  const first = await get(`${url}/`);
  assert.deepEqual([first.status, first.headers['retry-after'], first.headers.ratelimit], [429, '13', '"per_ip";r=0;t=30']);
  clock.now = 2500;
  const res = await get(`${url}/`);
  assert.equal(fake.requests.length, 1, 'answered from the memory of refusals');
  assert.equal(res.status, 429);
  assert.equal(res.headers['retry-after'], '10', '12.1 s - 2.5 s, rounded up');
  assert.equal(res.headers.ratelimit, '"per_ip";r=0;t=28');
  assert.equal(res.headers['ratelimit-policy'], '"per_ip";q=2;w=60');
  assert.match(res.body, /"detail":"Too many requests; retry in 10 s\.","violated-policies":\["per_ip"\]/);
  assert.equal(client.localRefusals, 1);
  clock.now = 5000;
  assert.equal((await get(`${url}/`)).status, 429);
  assert.equal(fake.requests.length, 2, 'asked again after the cap');
});

test('refused without a limit name: no violated-policies, Retry-After at least 1', async (t) => {
  const resp = overResponse();
  resp.statuses[0].limit.name = '<&>';
  resp.statuses[0].retryAfter = { seconds: 0, nanos: 0 };
  resp.statuses.push({ ...overResponse().statuses[0], limit: undefined });
  const { client } = await setup(t, () => resp);
  const url = await serve(t, middleware(client, 'edge'));
  const res = await get(`${url}/`);
  assert.equal(res.status, 429);
  assert.equal(res.headers['retry-after'], '13');
  assert.match(res.body, /"violated-policies":\["\\u003c\\u0026\\u003e"\]\}\n$/, 'escaped as Go escapes HTML characters');

  const { client: c2 } = await setup(t, () => ({ code: 2, statuses: [{ code: 2 }] }));
  const url2 = await serve(t, middleware(c2, 'edge'));
  const res2 = await get(`${url2}/`);
  assert.equal(res2.headers['retry-after'], '1');
  assert.doesNotMatch(res2.body, /violated-policies/);
});

test('X-RateLimit headers of the tightest limit, on request', async (t) => {
  const resp = okResponse();
  resp.statuses.push({ ...resp.statuses[0], remaining: 3, resetAfter: { seconds: 1, nanos: 1 }, limit: { ...resp.statuses[0].limit, requests: 5 } });
  resp.statuses.push({ code: 1, remaining: 4294967295, unlimited: true });
  const { client } = await setup(t, () => resp);
  const url = await serve(t, middleware(client, 'edge', { xRateLimitHeaders: true }));
  const res = await get(`${url}/`);
  assert.equal(res.status, 200);
  assert.equal(res.headers['x-ratelimit-limit'], '5');
  assert.equal(res.headers['x-ratelimit-remaining'], '3');
  assert.equal(res.headers['x-ratelimit-reset'], '2');
});

test('a trusted proxy: the client is the right-most untrusted X-Forwarded-For address', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const url = await serve(t, middleware(client, 'edge', { trustedProxies: ['127.0.0.0/8', '10.0.0.0/8'] }));
  await get(`${url}/`, { 'X-Forwarded-For': '198.51.100.7, 203.0.113.9, 10.1.2.3' });
  await get(`${url}/`, { 'X-Forwarded-For': '2001:db8:1:2:3:4:5:6' });
  await get(`${url}/`, { 'X-Forwarded-For': 'unknown, 10.0.0.1' });
  assert.deepEqual(fake.requests.map((r) => entries(r)), [
    [['remote_address=203.0.113.9']],
    [['remote_address=2001:db8:1:2::']],
    [['remote_address=10.0.0.1']],
  ], 'trustedProxies alone counts by client IP only');
});

test('API key, route function, custom descriptors, in the Go order', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const url = await serve(
    t,
    middleware(client, 'edge', {
      apiKeyHeader: 'X-API-Key',
      clientIP: true,
      route: (req) => req.url.replace(/\/\d+/g, '/{id}'),
      descriptors: async (req) => [D('tenant', req.headers['x-tenant'] || 'none', 'plan', 'free')],
    }),
  );
  await get(`${url}/items/42`, { 'X-API-Key': 'k1', 'X-Tenant': 'acme' }, 'DELETE');
  await get(`${url}/items/7`);
  await new Promise((resolve, reject) => {
    const req = http.request(`${url}/`, { agent: false }, (res) => res.resume().on('end', resolve));
    req.on('error', reject);
    req.setHeader('X-API-Key', ['first', 'second']);
    req.end();
  });
  assert.deepEqual(entries(fake.requests[2])[0], ['api_key=first'], 'the first of repeated fields, as Go reads it');
  assert.deepEqual(entries(fake.requests[0]), [
    ['api_key=k1'],
    ['remote_address=127.0.0.1'],
    ['path=/items/{id}', 'method=DELETE'],
    ['tenant=acme', 'plan=free'],
  ]);
  assert.deepEqual(entries(fake.requests[1]).slice(0, 1), [['remote_address=127.0.0.1']], 'no key, no api_key descriptor');
});

test('no descriptors, or skipped: next without asking ratelimitd', async (t) => {
  const { fake, client } = await setup(t, () => overResponse());
  const url = await serve(t, middleware(client, 'edge', { apiKeyHeader: 'X-API-Key' }));
  assert.equal((await get(`${url}/`)).status, 200);
  const url2 = await serve(t, middleware(client, 'edge', { skip: (req) => req.url === '/healthz' }));
  assert.equal((await get(`${url2}/healthz`)).status, 200);
  assert.equal((await get(`${url2}/other`)).status, 429);
  assert.equal(fake.requests.length, 1);
});

test('ratelimitd failing: open calls next without headers, closed answers 503', async (t) => {
  const fail = () => {
    throw { code: grpc.status.UNAVAILABLE, details: 'down' };
  };
  const { client: open } = await setup(t, fail);
  const res = await get(`${await serve(t, middleware(open, 'edge'))}/`);
  assert.equal(res.status, 200);
  assert.equal(res.headers.ratelimit, undefined);
  assert.equal(open.failOpens, 1);

  const { client: closed } = await setup(t, fail, { failClosed: true });
  const res2 = await get(`${await serve(t, middleware(closed, 'edge'))}/`);
  assert.equal(res2.status, 503);
  assert.equal(res2.headers['retry-after'], undefined);
  assert.equal(res2.headers['content-type'], 'text/plain; charset=utf-8');
  assert.equal(res2.body, 'rate limit service unavailable\n');
});

test('malformed descriptors: 500, logged at error, next not called, whatever the policy', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const logger = quiet();
  const url = await serve(t, middleware(client, 'edge', { descriptors: () => [{ entries: [] }], logger }));
  const res = await get(`${url}/`);
  assert.equal(res.status, 500);
  assert.equal(res.body, 'rate limit: malformed rate limit request\n');
  assert.match(logger.lines.error[0], /descriptor 0 has no entries/);
  assert.equal(fake.requests.length, 0);
});

test('a key function failing: 400 as in Go, logged at warn, never let through', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const logger = quiet();
  const failing = {
    descriptors: { descriptors: () => { throw new Error('no session'); } },
    'async descriptors': { descriptors: async () => { throw new Error('no session'); } },
    route: { route: () => { throw new Error('no session'); } },
    skip: { skip: async () => { throw new Error('no session'); } },
  };
  for (const [name, opts] of Object.entries(failing)) {
    let called = false;
    const mw = middleware(client, 'edge', { ...opts, logger });
    const url = await serve(t, (req, res, next) => mw(req, res, () => {
      called = true;
      next();
    }));
    const res = await get(`${url}/`);
    assert.equal(res.status, 400, name);
    assert.equal(res.body, 'rate limit: cannot attribute the request\n', name);
    assert.equal(res.headers['content-type'], 'text/plain; charset=utf-8');
    assert.equal(called, false, name);
  }
  assert.equal(logger.lines.warn.length, 4);
  assert.match(logger.lines.warn[0], /no session/);
  assert.deepEqual(logger.lines.error, []);
  assert.equal(fake.requests.length, 0);
});

test('keyErrorHandler answers for a failing key function', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const seen = [];
  const url = await serve(t, middleware(client, 'edge', {
    descriptors: () => { throw new Error('bad token'); },
    keyErrorHandler: (req, res, err) => {
      seen.push([req.url, err.message]);
      res.statusCode = 401;
      res.end('who are you?');
    },
  }));
  const res = await get(`${url}/x`);
  assert.deepEqual([res.status, res.body], [401, 'who are you?']);
  assert.deepEqual(seen, [['/x', 'bad token']]);
  assert.equal(fake.requests.length, 0);
});

/** fakeRes is a response whose appendHeader and setHeader run hook first. */
function fakeRes(hook = () => {}) {
  const res = new EventEmitter();
  res.headers = {};
  res.headersSent = false;
  res.writableEnded = false;
  res.statusCode = 200;
  res.getHeader = (n) => res.headers[n.toLowerCase()];
  res.setHeader = (n, v) => {
    hook(n, v);
    http.validateHeaderValue(n, v);
    if (res.headersSent) throw Object.assign(new Error('headers sent'), { code: 'ERR_HTTP_HEADERS_SENT' });
    res.headers[n.toLowerCase()] = v;
  };
  res.appendHeader = (n, v) => res.setHeader(n, [].concat(res.getHeader(n) || [], v));
  res.removeHeader = (n) => delete res.headers[n.toLowerCase()];
  res.end = (body) => {
    res.headersSent = true;
    res.writableEnded = true;
    res.body = body;
  };
  return res;
}

const fakeReq = () => ({ method: 'GET', url: '/', headers: {}, socket: { remoteAddress: '192.0.2.1' } });

test("response headers Node would refuse, or a response already sent, never reject the middleware's promise", { timeout: 60000 }, async (t) => {
  const resp = okResponse();
  resp.headers.push({ name: 'X-Bad', value: 'caf\u0100' }, { name: 'Bad Name', value: 'v' }, { name: 'X-Good', value: 'caf\u00e9' });
  const { client } = await setup(t, () => resp);
  const mw = middleware(client, 'edge', { logger: quiet() });
  // Headers Node cannot send are dropped, the others sent.
  const url = await serve(t, mw);
  const res = await get(`${url}/`);
  assert.equal(res.status, 200);
  assert.equal(res.headers['x-bad'], undefined);
  assert.equal(res.headers.ratelimit, '"per_ip";r=9;t=43');
  assert.ok(res.headers['x-good'], 'a value of latin1 characters is sent');

  // Another handler answered while ratelimitd was asked: no headers, no error.
  const { client: refusing } = await setup(t, () => overResponse());
  for (const c of [client, refusing]) {
    const r = fakeRes();
    const nexts = [];
    const p = middleware(c, 'edge')(fakeReq(), r, (...a) => nexts.push(a));
    r.end('early');
    await p;
    assert.equal(r.body, 'early');
    assert.deepEqual(r.headers, {});
    assert.ok(nexts.every((a) => a.length === 0), 'no next(err)');
  }

  // Any other error of the response goes to next(err), as Express expects.
  const boom = new Error('boom');
  const r = fakeRes(() => { throw boom; });
  const nexts = [];
  await middleware(client, 'edge')(fakeReq(), r, (...a) => nexts.push(a));
  assert.deepEqual(nexts, [[boom]]);
});

test("the API key's bytes are sent as they came, as Go sends them", async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const url = await serve(t, middleware(client, 'edge', { apiKeyHeader: 'X-API-Key' }));
  // Node sends (and reads) a header value's characters as latin1 bytes.
  await get(`${url}/`, { 'X-API-Key': 'k\u00e9' }); // the byte 0xE9: not UTF-8
  await get(`${url}/`, { 'X-API-Key': Buffer.from('k\u00e9', 'utf8').toString('latin1') }); // UTF-8 bytes of "ké"
  await get(`${url}/`, { 'X-API-Key': 'plain' });
  assert.deepEqual(fake.requests.map((r) => entries(r)[0]), [['api_key=raw:6be9'], ['api_key=k\u00e9'], ['api_key=plain']]);
});

test('IPv6 clients are counted per /64', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  let url;
  try {
    url = await serve(t, middleware(client, 'edge', { clientIP: true }), '::1');
  } catch (err) {
    t.skip(`no IPv6 loopback: ${err.message}`);
    return;
  }
  await get(`${url}/`);
  assert.deepEqual(entries(fake.requests[0]), [['remote_address=::']]);
});

test('clientIP and prefixes, as the Go ClientIP reads peers and headers', () => {
  const req = (peer, headers = {}) => ({ socket: { remoteAddress: peer }, headers });
  const trustedProxies = ['10.0.0.0/8', '2001:db8:ffff::/48'];
  const cases = [
    [req('192.0.2.1'), {}, '192.0.2.1'],
    [req('::ffff:192.0.2.1'), {}, '192.0.2.1'],
    [req('fe80::1%eth0'), {}, 'fe80::1'],
    [req(undefined), {}, null],
    [req('192.0.2.1', { 'x-forwarded-for': '1.2.3.4' }), { trustedProxies }, '192.0.2.1'],
    [req('10.0.0.2', { 'x-forwarded-for': '1.2.3.4, 10.9.9.9' }), { trustedProxies }, '1.2.3.4'],
    [req('10.0.0.2', { 'x-forwarded-for': '10.1.1.1, 10.9.9.9' }), { trustedProxies }, '10.1.1.1'],
    [req('10.0.0.2', { 'x-forwarded-for': '1.2.3.4, garbage, 10.9.9.9' }), { trustedProxies }, '10.9.9.9'],
    [req('10.0.0.2', { 'x-forwarded-for': '[2001:db8::1]:443' }), { trustedProxies }, '2001:db8::1'],
    [req('2001:db8:ffff::1', { 'x-forwarded-for': '198.51.100.1:8080' }), { trustedProxies }, '198.51.100.1'],
    [req('10.0.0.2', { forwarded: 'for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"' }), { trustedProxies, proxyHeader: 'Forwarded' }, '2001:db8:cafe::17'],
    [req('10.0.0.2', { forwarded: 'for=192.0.2.60, for=unknown' }), { trustedProxies, proxyHeader: 'Forwarded' }, '10.0.0.2'],
    [req('10.0.0.2', { forwarded: 'for="_hidden", for=10.3.3.3' }), { trustedProxies, proxyHeader: 'Forwarded' }, '10.3.3.3'],
    [req('10.0.0.2', { 'x-real-ip': '192.0.2.9' }), { trustedProxies, proxyHeader: 'X-Real-IP' }, '192.0.2.9'],
  ];
  for (const [r, opts, want] of cases) {
    assert.equal(clientIP(r, opts), want, JSON.stringify([r, opts]));
  }
  // IPv4-mapped trusted proxies (Node shows peers on dual-stack sockets
  // so) match the peer, which is compared unmapped.
  const xff = { 'x-forwarded-for': '1.2.3.4' };
  for (const [proxies, peer, want] of [
    [['::ffff:10.0.0.5'], '::ffff:10.0.0.5', '1.2.3.4'],
    [['::ffff:10.0.0.5'], '10.0.0.5', '1.2.3.4'],
    [['::ffff:10.0.0.0/104'], '::ffff:10.9.0.1', '1.2.3.4'],
    [['::ffff:10.0.0.0/104'], '11.0.0.1', '11.0.0.1'],
    [['::ffff:0:0/96'], '192.0.2.7', '1.2.3.4'],
    [['::/64'], '192.0.2.7', '192.0.2.7'],
  ]) {
    assert.equal(clientIP(req(peer, xff), { trustedProxies: proxies }), want, `${proxies} ${peer}`);
  }
  assert.throws(() => clientIP(req('10.0.0.2'), { trustedProxies: ['10.0.0.0/33'] }), TypeError);
  assert.throws(() => middleware({}, 'edge', { ipv6Prefix: 129 }), RangeError);
});

test('ipv4Prefix and ipv6Prefix shape the network counted', async (t) => {
  const { fake, client } = await setup(t, () => okResponse());
  const url = await serve(t, middleware(client, 'edge', { trustedProxies: ['127.0.0.1'], ipv4Prefix: 24, ipv6Prefix: 48 }));
  await get(`${url}/`, { 'X-Forwarded-For': '198.51.100.77' });
  await get(`${url}/`, { 'X-Forwarded-For': '2001:db8:1:2::9' });
  assert.deepEqual(fake.requests.map((r) => entries(r)[0][0]), ['remote_address=198.51.100.0', 'remote_address=2001:db8:1::']);
});
