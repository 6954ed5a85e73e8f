'use strict';
// The generated stubs (see ../scripts/copy-stubs.js): ratelimitd's native
// API and Envoy's RLS v3, with @grpc/grpc-js service clients.

/** ratelimit.v1: ratelimitd's native API. */
exports.ratelimitV1 = require('../gen/ratelimit/v1/ratelimit.js');
/** envoy.service.ratelimit.v3: Envoy's rate limit service. */
exports.envoyRatelimitV3 = require('../gen/envoy/service/ratelimit/v3/rls.js');
/** google.protobuf.Duration, which both APIs use. */
exports.duration = require('../gen/google/protobuf/duration.js');
