'use strict';
// The errors the package throws or reports, as classes callers can test
// with instanceof, each with a gRPC status code (code) as ratelimitd
// would answer: 3 (INVALID_ARGUMENT) for a malformed request, 14
// (UNAVAILABLE) when no assignment of ratelimitd is in force.

/** Status codes of the errors below (grpc.status's numbers). */
const INVALID_ARGUMENT = 3;
const RESOURCE_EXHAUSTED = 8;
const FAILED_PRECONDITION = 9;
const UNAVAILABLE = 14;

/**
 * A RateLimitError is an error of the package: a malformed request
 * (code 3, INVALID_ARGUMENT), found before any RPC, or a failure the
 * failure policy decided (see NoAssignmentError). details is the message
 * without the package's prefix, as a gRPC error's details are.
 */
class RateLimitError extends Error {
  /**
   * @param {string} details what went wrong
   * @param {number} code a gRPC status code
   * @param {{cause?: unknown}} [options]
   */
  constructor(details, code, options) {
    super(`ratelimitd: ${details}`, options);
    this.name = 'RateLimitError';
    this.code = code;
    this.details = details;
  }
}

/**
 * A NoAssignmentError is Decision.error when a Quota's failure policy
 * decided: a bucket had no assignment of ratelimitd in force (none
 * received yet, or expired because ratelimitd could not be reached), or
 * the Quota held as many buckets as it may. Code 14 (UNAVAILABLE).
 */
class NoAssignmentError extends RateLimitError {
  constructor() {
    super('quota: no assignment in force from ratelimitd', UNAVAILABLE);
    this.name = 'NoAssignmentError';
  }
}

/**
 * A SlotRefusedError is withSlot's rejection when ratelimitd refused the
 * slot (or the failure policy did, failing closed): decision is the
 * acquire's. Code 8 (RESOURCE_EXHAUSTED).
 */
class SlotRefusedError extends RateLimitError {
  constructor(decision) {
    super(`no slot: retry in ${decision.retryAfterMs} ms`, RESOURCE_EXHAUSTED);
    this.name = 'SlotRefusedError';
    this.decision = decision;
  }
}

/**
 * A LeaseLostError is Lease.renew's rejection when the lease has expired
 * or was released: its slots may be held by others now, and the work
 * should stop, or acquire again. Code 9 (FAILED_PRECONDITION).
 */
class LeaseLostError extends RateLimitError {
  constructor() {
    super('lease expired or released', FAILED_PRECONDITION);
    this.name = 'LeaseLostError';
  }
}

/** invalid returns the RateLimitError of a malformed request. */
function invalid(details) {
  return new RateLimitError(details, INVALID_ARGUMENT);
}

module.exports = {
  RateLimitError,
  NoAssignmentError,
  SlotRefusedError,
  LeaseLostError,
  invalid,
  INVALID_ARGUMENT,
  RESOURCE_EXHAUSTED,
  FAILED_PRECONDITION,
  UNAVAILABLE,
};
