'use strict';
// Test helpers: an in-process gRPC server of the native API answering
// from a script, over real gRPC on loopback.

const grpc = require('@grpc/grpc-js');
const { ratelimitV1: pb } = require('..');

/**
 * startFake starts a gRPC server on a free loopback port. answer(req) is
 * called for each ShouldRateLimit and returns the response (a partial
 * ShouldRateLimitResponse), throws a {code, details} error to fail the
 * call, or returns the string 'hang' to never answer. With answer null the
 * server serves no service at all (every call is UNIMPLEMENTED). It
 * returns the address, the requests received, and stop().
 */
async function startFake(answer) {
  const server = new grpc.Server();
  const requests = [];
  const hanging = [];
  if (answer) {
    server.addService(pb.RateLimitServiceService, {
      shouldRateLimit(call, callback) {
        requests.push(call.request);
        let resp;
        try {
          resp = answer(call.request);
        } catch (err) {
          callback(err);
          return;
        }
        if (resp === 'hang') {
          hanging.push(callback);
          return;
        }
        callback(null, pb.ShouldRateLimitResponse.fromPartial(resp));
      },
    });
  }
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });
  return {
    addr: `127.0.0.1:${port}`,
    requests,
    stop() {
      for (const cb of hanging) cb({ code: grpc.status.UNAVAILABLE, details: 'stopping' });
      server.forceShutdown();
    },
  };
}

/** ok is a response allowing a one-descriptor request. */
function okResponse(extra = {}) {
  return {
    code: pb.Code.CODE_OK,
    statuses: [
      {
        code: pb.Code.CODE_OK,
        limit: { requests: 10, window: { seconds: 60, nanos: 0 }, algorithm: pb.Algorithm.ALGORITHM_SLIDING_WINDOW, name: 'per_ip', burst: 10 },
        remaining: 9,
        resetAfter: { seconds: 42, nanos: 500000000 },
      },
    ],
    headers: [
      { name: 'RateLimit-Policy', value: '"per_ip";q=10;w=60' },
      { name: 'RateLimit', value: '"per_ip";r=9;t=43' },
    ],
    ...extra,
  };
}

/** overResponse is a response refusing a one-descriptor request. */
function overResponse() {
  return {
    code: pb.Code.CODE_OVER_LIMIT,
    statuses: [
      {
        code: pb.Code.CODE_OVER_LIMIT,
        limit: { requests: 2, window: { seconds: 60, nanos: 0 }, algorithm: pb.Algorithm.ALGORITHM_SLIDING_LOG, name: 'per_ip', burst: 2 },
        remaining: 0,
        resetAfter: { seconds: 30, nanos: 0 },
        retryAfter: { seconds: 12, nanos: 100000000 },
      },
    ],
    headers: [
      { name: 'RateLimit-Policy', value: '"per_ip";q=2;w=60' },
      { name: 'RateLimit', value: '"per_ip";r=0;t=30' },
      { name: 'Retry-After', value: '99' },
    ],
  };
}

module.exports = { startFake, okResponse, overResponse };
