'use strict';
// A fake RateLimiter for the tests of code that uses the package, as the
// Go client's clienttest.Fake: it answers shouldRateLimit by a script,
// with no ratelimitd, and records the calls.

const { check } = require('./client.js');
const { RateLimitError, UNAVAILABLE } = require('./errors.js');

/** decision returns a Decision with the fields a Client's has. */
function decision(allowed, retryAfterMs, error) {
  return { allowed, statuses: [], retryAfterMs, headers: [], error, local: false };
}

/** cloneDescriptors copies ds, so that a recorded call keeps what was asked. */
function cloneDescriptors(ds) {
  return ds.map((d) => ({ ...d, entries: d.entries.map((e) => ({ ...e })), ...(d.limit ? { limit: { ...d.limit } } : {}) }));
}

/**
 * A FakeRateLimiter is a RateLimiter answering by a script, for tests:
 * see index.d.ts. A new one allows every well-formed request.
 */
class FakeRateLimiter {
  constructor() {
    this._queue = [];
    this._default = null;
    this._calls = [];
  }

  /** allow returns an answer allowing the call. */
  static allow() {
    return () => decision(true, 0, null);
  }

  /** refuse returns an answer refusing the call, to be retried in retryAfterMs (a Retry-After header with it, in whole seconds). */
  static refuse(retryAfterMs) {
    return () => {
      const d = decision(false, retryAfterMs, null);
      d.headers = [{ name: 'Retry-After', value: String(Math.max(Math.ceil(retryAfterMs / 1000), 0)) }];
      return d;
    };
  }

  /** failOpen returns the answer of a Client failing open: allowed, error set (err, or an UNAVAILABLE RateLimitError). */
  static failOpen(err) {
    return () => decision(true, 0, err || new RateLimitError('fake: ratelimitd unavailable', UNAVAILABLE));
  }

  /** failClosed returns the answer of a Client failing closed: refused, error set. */
  static failClosed(err) {
    return () => decision(false, 0, err || new RateLimitError('fake: ratelimitd unavailable', UNAVAILABLE));
  }

  /** fail returns an answer rejecting the call with err. */
  static fail(err) {
    return () => {
      throw err;
    };
  }

  /** push queues answers: each of the next calls takes the first one left, before the default answer applies again. */
  push(...answers) {
    this._queue.push(...answers);
  }

  /** setDefault sets the answer of calls when no queued answer is left; null restores allow. */
  setDefault(answer) {
    this._default = answer || null;
  }

  /** The calls answered, in order: {domain, descriptors, decision, error}. */
  get calls() {
    return this._calls.slice();
  }

  /** reset forgets the calls, the queued answers and the default answer. */
  reset() {
    this._queue = [];
    this._default = null;
    this._calls = [];
  }

  /**
   * shouldRateLimit answers as a Client would: a malformed request
   * rejects with its RateLimitError (code 3), an aborted signal with its
   * reason, before any answer; other calls take the next queued answer,
   * else the default one, else allow. Every call is recorded.
   */
  async shouldRateLimit(domain, descriptors, options = {}) {
    const call = { domain, descriptors: Array.isArray(descriptors) ? descriptors : [], decision: null, error: null };
    try {
      check(domain, descriptors);
      call.descriptors = cloneDescriptors(descriptors);
      if (options.signal && options.signal.aborted) throw options.signal.reason;
      const answer = this._queue.length > 0 ? this._queue.shift() : this._default || FakeRateLimiter.allow();
      call.decision = await answer(domain, call.descriptors);
      return call.decision;
    } catch (err) {
      call.error = err;
      throw err;
    } finally {
      this._calls.push(call);
    }
  }
}

module.exports = { FakeRateLimiter };
