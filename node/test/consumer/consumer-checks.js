// The checks both consumers run: the exports, and against the live
// ratelimitd at RATELIMITD_ADDR (rules: domain q, user 2 a minute, open
// unlimited, banned 0) a Client through the application's own
// @grpc/grpc-js, a Quota, and the middleware over the Quota.
'use strict';
const http = require('node:http');

async function checks(r, grpc, tag) {
  const out = { tag, exports: ['Client', 'Quota', 'middleware', 'FakeRateLimiter', 'RateLimitError', 'NoAssignmentError', 'D'].filter((n) => typeof r[n] !== 'function') };
  try {
    new r.Quota('127.0.0.1:1', { domain: '' });
  } catch (err) {
    out.badOptions = err instanceof r.RateLimitError && err.code === 3;
  }
  const addr = process.env.RATELIMITD_ADDR;
  if (!addr) return out;
  // The stubs work with the application's own grpc-js (a peer dependency).
  const stub = new r.ratelimitV1.RateLimitServiceClient(addr, grpc.credentials.createInsecure());
  const c = new r.Client(stub);
  const user = `${tag}-${process.pid}`;
  out.client = [];
  for (let i = 0; i < 3; i++) out.client.push((await c.shouldRateLimit('q', [r.D('user', user)])).allowed);
  stub.close();
  const q = new r.Quota(addr, { domain: 'q', failClosed: true, logger: { warn() {}, error() {} } });
  const open = [r.D('open', tag)];
  const banned = [r.D('banned', tag)];
  q.allow(open);
  q.allow(banned);
  for (const deadline = Date.now() + 30000; ; await new Promise((res) => setTimeout(res, 5))) {
    const a = await q.shouldRateLimit('q', open);
    const b = await q.shouldRateLimit('q', banned);
    if (a.error === null && b.error === null) break;
    if (Date.now() > deadline) throw new Error('no assignment in 30 s');
  }
  out.quota = [q.allow(open), q.allow(banned)];
  const mw = r.middleware(q, 'q', { descriptors: (req) => [r.D(req.url.slice(1), tag)], clientIP: false });
  const server = http.createServer((req, res) => mw(req, res, () => res.writeHead(204).end()));
  await new Promise((res) => server.listen(0, '127.0.0.1', res));
  out.middleware = [];
  for (const p of ['/open', '/banned']) {
    out.middleware.push(
      await new Promise((res, rej) =>
        http.get({ host: '127.0.0.1', port: server.address().port, path: p }, (resp) => {
          resp.resume();
          resp.on('end', () => res(resp.statusCode));
        }).on('error', rej),
      ),
    );
  }
  server.close();
  q.close();
  return out;
}

module.exports = { checks };
