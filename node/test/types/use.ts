// Compiled, not run, by types.test.js: the package's types as a TypeScript user sees them.
import { Client, Quota, D, Lease, withSlot, SlotRefusedError, LeaseLostError, RELEASE_TIMEOUT_MS, middleware, envoyRatelimitV3, ratelimitV1, rlqsV3, Decision, RateLimiter, FakeRateLimiter, RateLimitError, NoAssignmentError, grpc, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_REFUSAL_CACHE_MS, DEFAULT_REFUSAL_CACHE_SIZE, DEFAULT_REPORTING_INTERVAL_MS } from 'ratelimitd';
import * as http from 'node:http';
async function ask(rl: RateLimiter): Promise<boolean> {
  try {
    const d = await rl.shouldRateLimit('edge', [D('k', 'v')]);
    return d.allowed && !(d.error instanceof NoAssignmentError);
  } catch (err) {
    if (err instanceof RateLimitError && err.code === 3) return false;
    throw err;
  }
}
async function main(): Promise<void> {
  const c = new Client('127.0.0.1:8081', { failClosed: true, onDecision: (d: Decision) => console.log(d.allowed) });
  const d = await c.shouldRateLimit('edge', [D('k', 'v'), { entries: [{ key: 'a', value: 'b' }], limit: { requests: 1, windowMs: 1000 } }]);
  const n: number = d.retryAfterMs + c.failOpens + c.localRefusals;
  const local: boolean = d.local;
  const quiet = new Client('127.0.0.1:8081', { refusalCacheMs: DEFAULT_REFUSAL_CACHE_MS / 2, refusalCacheSize: DEFAULT_REFUSAL_CACHE_SIZE, clock: () => 0, connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS * 2 });
  console.log(local, quiet);
  const q = new Quota('127.0.0.1:8081', { domain: 'edge', reportingIntervalMs: DEFAULT_REPORTING_INTERVAL_MS, failClosed: true, maxBuckets: 100 });
  const ok: boolean = q.allow([D('tenant', 'acme'), { entries: [{ key: 'raw', value: new Uint8Array([0xff]) }], hits: 2 }]);
  const counts: number = q.failOpens + q.overflows + q.size;
  const shared = new Quota(new rlqsV3.RateLimitQuotaServiceClient('x', grpc.credentials.createInsecure()), { domain: 'edge' });
  const fake = new FakeRateLimiter();
  fake.push(FakeRateLimiter.allow(), FakeRateLimiter.refuse(1000), FakeRateLimiter.failOpen());
  console.log(ok, counts, shared, await ask(c), await ask(q), await ask(fake), fake.calls.length);
  for (const rl of [c, q, fake]) {
    const mw = middleware(rl, 'edge', { trustedProxies: ['10.0.0.0/8'] });
    http.createServer((req, res) => mw(req, res, () => res.end()));
  }
  const e = new envoyRatelimitV3.RateLimitServiceClient('x', grpc.credentials.createInsecure());
  const code: envoyRatelimitV3.RateLimitResponse_Code = envoyRatelimitV3.RateLimitResponse_Code.OK;
  const r: ratelimitV1.ShouldRateLimitRequest = ratelimitV1.ShouldRateLimitRequest.fromPartial({ domain: 'x' });
  console.log(n, e, code, r);
  const lease: Lease = await c.acquire('jobs', [D('job', 'export')], { timeoutMs: RELEASE_TIMEOUT_MS });
  const until: Date | null = lease.expiresAt;
  try {
    await lease.renew();
  } catch (err) {
    if (!(err instanceof LeaseLostError)) throw err;
  } finally {
    await lease.release();
  }
  try {
    const got: number = await withSlot(c, 'jobs', [{ ...D('job', 'export'), hits: 2 }], async (l: Lease) => (l.allowed ? 1 : 0));
    console.log(got, until);
  } catch (err) {
    if (err instanceof SlotRefusedError) console.log(err.decision.retryAfterMs);
  }
  await c.shouldRateLimit('edge', [{ ...D('tokens', 'u'), hits: 3, giveBack: true }]);
  q.close();
}
main();
