'use strict';
// ratelimitd: a client of ratelimitd's native API, a quota mode deciding
// locally over RLQS, an HTTP middleware, a fake for users' tests, and the
// gRPC stubs of its APIs. Types: ../index.d.ts. ESM: ../index.mjs.

const {
  Client,
  D,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REFUSAL_CACHE_MS,
  DEFAULT_REFUSAL_CACHE_SIZE,
  Lease,
  withSlot,
  RELEASE_TIMEOUT_MS,
} = require('./client.js');
const { Quota, DEFAULT_REPORTING_INTERVAL_MS, DEFAULT_QUOTA_MAX_BUCKETS, QUOTA_IDLE_INTERVALS } = require('./quota.js');
const { middleware, clientIP, QUOTA_EXCEEDED } = require('./middleware.js');
const { FakeRateLimiter } = require('./fake.js');
const { RateLimitError, NoAssignmentError, SlotRefusedError, LeaseLostError } = require('./errors.js');
const stubs = require('./stubs.js');

module.exports = {
  Client,
  Quota,
  D,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REFUSAL_CACHE_MS,
  DEFAULT_REFUSAL_CACHE_SIZE,
  RELEASE_TIMEOUT_MS,
  Lease,
  withSlot,
  DEFAULT_REPORTING_INTERVAL_MS,
  DEFAULT_QUOTA_MAX_BUCKETS,
  QUOTA_IDLE_INTERVALS,
  middleware,
  clientIP,
  QUOTA_EXCEEDED,
  FakeRateLimiter,
  RateLimitError,
  NoAssignmentError,
  SlotRefusedError,
  LeaseLostError,
  ratelimitV1: stubs.ratelimitV1,
  envoyRatelimitV3: stubs.envoyRatelimitV3,
  rlqsV3: stubs.rlqsV3,
  duration: stubs.duration,
  // Deprecated: @grpc/grpc-js is a peer dependency, so the application's
  // own require('@grpc/grpc-js') is the instance the stubs use. Kept for
  // code written against the versions that bundled it.
  grpc: require('@grpc/grpc-js'),
};
