// Type-checked (tsc --strict) by pack.test.js against the installed tarball, as CommonJS.
import ratelimitd = require('ratelimitd');
import grpc = require('@grpc/grpc-js');

const q: ratelimitd.RateLimiter = new ratelimitd.Quota('127.0.0.1:8081', { domain: 'q', failClosed: true });
const c = new ratelimitd.Client(new ratelimitd.ratelimitV1.RateLimitServiceClient('x', grpc.credentials.createInsecure()));
const err: ratelimitd.RateLimitError = new ratelimitd.NoAssignmentError();
ratelimitd.middleware(q, 'q');
console.log(c, err.code);
