'use strict';
// ratelimitd: a client of ratelimitd's native API, an HTTP middleware, and
// the gRPC stubs of both its APIs. Types: ../index.d.ts.

const {
  Client,
  D,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REFUSAL_CACHE_MS,
  DEFAULT_REFUSAL_CACHE_SIZE,
} = require('./client.js');
const { middleware, clientIP, QUOTA_EXCEEDED } = require('./middleware.js');
const grpc = require('@grpc/grpc-js');
const stubs = require('./stubs.js');

module.exports = {
  Client,
  D,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REFUSAL_CACHE_MS,
  DEFAULT_REFUSAL_CACHE_SIZE,
  middleware,
  clientIP,
  QUOTA_EXCEEDED,
  ratelimitV1: stubs.ratelimitV1,
  envoyRatelimitV3: stubs.envoyRatelimitV3,
  duration: stubs.duration,
  // The @grpc/grpc-js the stubs use: its credentials and metadata work with them.
  grpc,
};
