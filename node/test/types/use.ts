// Compiled, not run, by types.test.js: the package's types as a TypeScript user sees them.
import { Client, D, middleware, envoyRatelimitV3, ratelimitV1, Decision, grpc, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_REFUSAL_CACHE_MS, DEFAULT_REFUSAL_CACHE_SIZE } from 'ratelimitd';
import * as http from 'node:http';
async function main(): Promise<void> {
  const c = new Client('127.0.0.1:8081', { failClosed: true, onDecision: (d: Decision) => console.log(d.allowed) });
  const d = await c.shouldRateLimit('edge', [D('k', 'v'), { entries: [{ key: 'a', value: 'b' }], limit: { requests: 1, windowMs: 1000 } }]);
  const n: number = d.retryAfterMs + c.failOpens + c.localRefusals;
  const local: boolean = d.local;
  const quiet = new Client('127.0.0.1:8081', { refusalCacheMs: DEFAULT_REFUSAL_CACHE_MS / 2, refusalCacheSize: DEFAULT_REFUSAL_CACHE_SIZE, clock: () => 0, connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS * 2 });
  console.log(local, quiet);
  const mw = middleware(c, 'edge', { trustedProxies: ['10.0.0.0/8'] });
  http.createServer((req, res) => mw(req, res, () => res.end()));
  const e = new envoyRatelimitV3.RateLimitServiceClient('x', grpc.credentials.createInsecure());
  const code: envoyRatelimitV3.RateLimitResponse_Code = envoyRatelimitV3.RateLimitResponse_Code.OK;
  const r: ratelimitV1.ShouldRateLimitRequest = ratelimitV1.ShouldRateLimitRequest.fromPartial({ domain: 'x' });
  console.log(n, e, code, r);
}
main();
