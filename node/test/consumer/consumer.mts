// Type-checked (tsc --strict) by pack.test.js against the installed tarball, as ESM.
import { Client, Quota, D, middleware, FakeRateLimiter, RateLimitError, type RateLimiter, type Decision } from 'ratelimitd';
import whole from 'ratelimitd';
import * as grpc from '@grpc/grpc-js';

const limiters: RateLimiter[] = [new Client('127.0.0.1:8081'), new Quota('127.0.0.1:8081', { domain: 'q' }), new FakeRateLimiter()];
const d: Promise<Decision> = limiters[0].shouldRateLimit('q', [D('k', 'v')]);
const ok: boolean = new Quota(new whole.rlqsV3.RateLimitQuotaServiceClient('x', grpc.credentials.createInsecure()), { domain: 'q' }).allow([D('k', 'v')]);
const e: number = new RateLimitError('x', 3).code;
middleware(limiters[1], 'q');
console.log(d, ok, e);
