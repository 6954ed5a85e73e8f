// The ES module entry point of ratelimitd: the CommonJS package's exports
// (lib/index.js), re-exported by name, so that import and require share
// one instance of every class (one Client, one RateLimitError...).
import ratelimitd from './lib/index.js';

export const {
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
  ratelimitV1,
  envoyRatelimitV3,
  rlqsV3,
  duration,
  grpc,
} = ratelimitd;
export default ratelimitd;
