'use strict';
// Test helpers: an in-process gRPC server of the native API answering
// from a script, over real gRPC on loopback, and a proxy that delays the
// handshake.

const net = require('node:net');
const grpc = require('@grpc/grpc-js');
const { ratelimitV1: pb } = require('..');

/**
 * startFake starts a gRPC server on a free loopback port. answer(req) is
 * called for each ShouldRateLimit and returns the response (a partial
 * ShouldRateLimitResponse), throws a {code, details} error to fail the
 * call, or returns the string 'hang' to never answer. With answer null the
 * server serves no service at all (every call is UNIMPLEMENTED). leases,
 * when given, answers the lease calls the same way: leases.acquire(req),
 * leases.release(req) and leases.renew(req) (each recorded in requests
 * too); without it they are UNIMPLEMENTED. It returns the address, the
 * requests received, their methods, and stop().
 */
async function startFake(answer, leases = null) {
  const server = new grpc.Server();
  const requests = [];
  const hanging = [];
  const methods = []; // the method of each of requests
  // scripted serves calls of method from answerFn, with responses of type.
  const scripted = (method, answerFn, type) => (call, callback) => {
    requests.push(call.request);
    methods.push(method);
    let resp;
    try {
      resp = answerFn(call.request);
    } catch (err) {
      callback(err);
      return;
    }
    if (resp === 'hang') {
      hanging.push(callback);
      return;
    }
    callback(null, type.fromPartial(resp));
  };
  if (answer) {
    server.addService(pb.RateLimitServiceService, {
      shouldRateLimit: scripted('shouldRateLimit', answer, pb.ShouldRateLimitResponse),
      ...(leases && {
        acquire: scripted('acquire', leases.acquire, pb.AcquireResponse),
        release: scripted('release', leases.release, pb.ReleaseResponse),
        renew: scripted('renew', leases.renew, pb.RenewResponse),
      }),
    });
  }
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });
  return {
    addr: `127.0.0.1:${port}`,
    requests,
    methods,
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

/**
 * startProxy starts a TCP proxy on a free loopback port (or port) to
 * upstream ("host:port") that forwards each connection it accepts only
 * delayMs after accepting it: the client's TCP handshake completes at
 * once, gRPC's (the server's SETTINGS frame) waits, as it does for a
 * server that is starting, loaded or far away. delayMs < 0 never
 * forwards: the server looks hung. It returns the address, accepted (a
 * promise resolved at the first connection accepted), drop(delayMs),
 * which closes the connections so far (as a server that restarts does)
 * and sets the delay of the next ones, and close().
 */
async function startProxy(upstream, delayMs, port = 0) {
  const [host, upPort] = upstream.split(':');
  const sockets = new Set();
  const timers = new Set();
  let delay = delayMs;
  let onAccept;
  const accepted = new Promise((resolve) => (onAccept = resolve));
  const track = (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const server = net.createServer((conn) => {
    onAccept();
    track(conn);
    if (delay < 0) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (conn.destroyed) return;
      const up = net.connect(Number(upPort), host);
      track(up);
      conn.pipe(up);
      up.pipe(conn);
      conn.on('close', () => up.destroy());
      up.on('close', () => conn.destroy());
    }, delay);
    timers.add(timer);
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const drop = (next) => {
    if (next !== undefined) delay = next;
    for (const s of sockets) s.destroy();
  };
  return {
    addr: `127.0.0.1:${server.address().port}`,
    port: server.address().port,
    accepted,
    drop,
    close() {
      for (const t of timers) clearTimeout(t);
      drop();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** closedAddr returns a loopback address nothing listens on: connecting is refused. */
async function closedAddr() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `127.0.0.1:${port}`;
}

module.exports = { startFake, okResponse, overResponse, startProxy, closedAddr };
