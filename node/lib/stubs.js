'use strict';
// The generated stubs (see ../scripts/copy-stubs.js): ratelimitd's native
// API and Envoy's RLS v3, with @grpc/grpc-js service clients.

/** ratelimit.v1: ratelimitd's native API. */
exports.ratelimitV1 = require('../gen/ratelimit/v1/ratelimit.js');
/** envoy.service.ratelimit.v3: Envoy's rate limit service. */
exports.envoyRatelimitV3 = require('../gen/envoy/service/ratelimit/v3/rls.js');
/** google.protobuf.Duration, which both APIs use. */
exports.duration = require('../gen/google/protobuf/duration.js');
/** envoy.service.rate_limit_quota.v3: Envoy's Rate Limit Quota Service (the quota mode's). */
exports.rlqsV3 = require('../gen/envoy/service/rate_limit_quota/v3/rlqs.js');
/** envoy.type.v3's rate limit strategy, of RLQS's assignments. */
exports.rateLimitStrategy = require('../gen/envoy/type/v3/ratelimit_strategy.js');
