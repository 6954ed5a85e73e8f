'use strict';
// The client of ratelimitd's native API (ratelimit.v1), with the
// semantics of the Go client (github.com/ratelimitd/ratelimitd/client):
// a budget per call, a failure policy, values of any bytes and length, a
// memory of refusals.

const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const { ratelimitV1: pb } = require('./stubs.js');
const { Refusals, refusalKey, DEFAULT_REFUSAL_CACHE_MS, DEFAULT_REFUSAL_CACHE_SIZE } = require('./refusals.js');
const { MAX_VALUE, utf8 } = require('./util.js'); // MAX_VALUE: a longer value is sent as its SHA-256 digest
const { invalid, SlotRefusedError, LeaseLostError } = require('./errors.js');

/** The default budget of one shouldRateLimit call, in milliseconds. */
const DEFAULT_TIMEOUT_MS = 50;
/** How long, by default, calls wait for a connection attempt, in milliseconds. */
const DEFAULT_CONNECT_TIMEOUT_MS = 1000;
/** How long, at most, a release waits for ratelimitd, in milliseconds (see Lease.release). */
const RELEASE_TIMEOUT_MS = 1000;
/** The least an auto-renewal waits, in milliseconds, so that a lease about to expire does not make it spin. */
const MIN_RENEW_WAIT_MS = 100;

const { IDLE, READY, TRANSIENT_FAILURE, SHUTDOWN } = grpc.connectivityState;

// ratelimitd's bounds on a request, which the Client checks before
// sending it.
const MAX_DOMAIN = 256;
const MAX_DESCRIPTORS = 64;
const MAX_ENTRIES = 32;
const MAX_KEY = 1024;
const MAX_HITS = 0xffffffff;
const MAX_REQUEST = 1 << 20; // bytes of the encoded request
// The bounds of a limit override's window, in milliseconds.
const MIN_OVERRIDE_WINDOW_MS = 1;
const MAX_OVERRIDE_WINDOW_MS = 100 * 365 * 24 * 3600 * 1000;

const ALGORITHMS = {
  [pb.Algorithm.ALGORITHM_SLIDING_WINDOW]: 'sliding_window',
  [pb.Algorithm.ALGORITHM_FIXED_WINDOW]: 'fixed_window',
  [pb.Algorithm.ALGORITHM_SLIDING_LOG]: 'sliding_log',
  [pb.Algorithm.ALGORITHM_TOKEN_BUCKET]: 'token_bucket',
  [pb.Algorithm.ALGORITHM_GCRA]: 'gcra',
  [pb.Algorithm.ALGORITHM_CONCURRENCY]: 'concurrency',
};

/**
 * D returns a descriptor of one hit whose entries are kv, given as key,
 * value pairs: D('path', '/login', 'remote_address', '10.0.0.1').
 */
function D(...kv) {
  if (kv.length % 2 === 1) throw new TypeError(`ratelimitd: D: odd argument count ${kv.length}`);
  const entries = [];
  for (let i = 0; i < kv.length; i += 2) entries.push({ key: kv[i], value: kv[i + 1] });
  return { entries };
}

/** wellFormed reports whether s has no lone surrogates (valid UTF-8 once encoded). */
function wellFormed(s) {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

/** isUint reports whether n is an integer from 0 to max. */
function isUint(n, max) {
  return Number.isInteger(n) && n >= 0 && n <= max;
}

/**
 * checkOverride throws INVALID_ARGUMENT for a limit override ratelimitd
 * would refuse: requests not an integer from 0 to 2^32-1, a window out of
 * [1 ms, 100 years] (of 365 days), or not a whole number of microseconds
 * (to the nanosecond, as floating point allows).
 */
function checkOverride(i, l) {
  if (typeof l !== 'object') throw invalid(`descriptor ${i}: limit override is not an object`);
  if (!isUint(l.requests, MAX_HITS)) {
    throw invalid(`descriptor ${i}: limit override requests ${l.requests} is not an integer from 0 to ${MAX_HITS}`);
  }
  const w = l.windowMs;
  if (typeof w !== 'number' || !(w >= MIN_OVERRIDE_WINDOW_MS && w <= MAX_OVERRIDE_WINDOW_MS)) {
    throw invalid(
      `descriptor ${i}: limit override windowMs ${w} out of range [${MIN_OVERRIDE_WINDOW_MS}, ${MAX_OVERRIDE_WINDOW_MS}] (1 ms to 100 years)`,
    );
  }
  const us = w * 1000;
  if (Math.abs(us - Math.round(us)) > 1e-3) {
    throw invalid(`descriptor ${i}: limit override windowMs ${w} is not a whole number of microseconds`);
  }
}

/**
 * check throws INVALID_ARGUMENT for the malformed requests ratelimitd
 * would refuse whatever its rules, so that they are reported even while
 * ratelimitd is away.
 */
function check(domain, descriptors) {
  if (typeof domain !== 'string' || domain === '') throw invalid('domain is empty');
  const dl = Buffer.byteLength(domain);
  if (dl > MAX_DOMAIN) throw invalid(`domain is ${dl} bytes, over the maximum ${MAX_DOMAIN}`);
  if (!wellFormed(domain)) throw invalid(`domain ${JSON.stringify(domain)} is not valid UTF-8`);
  if (!Array.isArray(descriptors) || descriptors.length === 0) throw invalid('no descriptors');
  if (descriptors.length > MAX_DESCRIPTORS) {
    throw invalid(`${descriptors.length} descriptors, over the maximum ${MAX_DESCRIPTORS}`);
  }
  descriptors.forEach((d, i) => {
    const entries = d && d.entries;
    if (!Array.isArray(entries) || entries.length === 0) throw invalid(`descriptor ${i} has no entries`);
    if (entries.length > MAX_ENTRIES) {
      throw invalid(`descriptor ${i} has ${entries.length} entries, over the maximum ${MAX_ENTRIES}`);
    }
    if (!d.checkOnly && d.hits !== undefined && !isUint(d.hits, MAX_HITS)) {
      throw invalid(`descriptor ${i}: hits ${d.hits} is not an integer from 0 to ${MAX_HITS}`);
    }
    if (d.checkOnly && d.giveBack) throw invalid(`descriptor ${i}: both checkOnly and giveBack`);
    if (d.limit != null) checkOverride(i, d.limit);
    entries.forEach((e, j) => {
      const key = e && e.key;
      if (typeof key !== 'string' || key === '') throw invalid(`descriptor ${i} entry ${j} has an empty key`);
      const kl = Buffer.byteLength(key);
      if (kl > MAX_KEY) throw invalid(`descriptor ${i} entry ${j}: key is ${kl} bytes, over the maximum ${MAX_KEY}`);
      if (!wellFormed(key)) throw invalid(`descriptor ${i} entry ${j}: key ${JSON.stringify(key)} is not valid UTF-8`);
      const v = e.value;
      if (typeof v !== 'string' && !(v instanceof Uint8Array)) {
        throw invalid(`descriptor ${i} entry ${j}: value is neither a string nor bytes`);
      }
    });
  });
}

/**
 * entry converts e. A value is sent as ratelimitd counts it, in the
 * smallest form that can be encoded: over 1024 bytes, as its SHA-256
 * digest; else, bytes that are not valid UTF-8 as raw_value; else as a
 * string.
 */
function entry(e) {
  const v = e.value;
  const bytes = typeof v === 'string' ? Buffer.from(v, 'utf8') : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (bytes.length > MAX_VALUE) {
    return { key: e.key, valueSha256: crypto.createHash('sha256').update(bytes).digest() };
  }
  if (typeof v === 'string') return { key: e.key, value: v };
  try {
    return { key: e.key, value: utf8.decode(bytes) };
  } catch {
    return { key: e.key, rawValue: Buffer.from(bytes) };
  }
}

/**
 * duration converts milliseconds (a whole number of microseconds, checked
 * by checkOverride) to a google.protobuf.Duration.
 */
function duration(ms) {
  const us = Math.round(ms * 1000);
  const seconds = Math.floor(us / 1e6);
  return { seconds, nanos: (us - seconds * 1e6) * 1000 };
}

/** millis converts a google.protobuf.Duration to milliseconds, not below 0. */
function millis(d) {
  if (!d) return 0;
  return Math.max(Number(d.seconds) * 1000 + d.nanos / 1e6, 0);
}

/**
 * utf8Bound returns at least the UTF-8 length of s, a well-formed string,
 * without encoding it: no UTF-16 unit takes more than 3 bytes.
 */
function utf8Bound(s) {
  return s.length * 3;
}

/**
 * request returns the request to send, checked by check, or throws
 * INVALID_ARGUMENT when it would exceed ratelimitd's largest request even
 * with long values digested.
 */
function request(domain, descriptors) {
  // bound is at least the encoded size: each field's bytes plus a generous
  // allowance for tags and lengths (16 per entry, 48 per descriptor with
  // its hits and override, 16 for the domain), so that only requests near
  // the limit are encoded here, to be measured, before gRPC encodes them.
  let bound = utf8Bound(domain) + 16;
  const req = pb.ShouldRateLimitRequest.fromPartial({
    domain,
    descriptors: descriptors.map((d) => {
      const rd = { entries: d.entries.map(entry) };
      for (const e of rd.entries) {
        bound += utf8Bound(e.key) + 16;
        if (e.valueSha256) bound += e.valueSha256.length;
        else if (e.rawValue) bound += e.rawValue.length;
        else bound += utf8Bound(e.value);
      }
      if (d.checkOnly) rd.hits = 0;
      else if (d.hits) rd.hits = d.hits;
      if (d.giveBack) rd.giveBack = true;
      if (d.limit != null) rd.limit = { requests: d.limit.requests, window: duration(d.limit.windowMs) };
      bound += 48;
      return rd;
    }),
  });
  if (bound > MAX_REQUEST) {
    const n = pb.ShouldRateLimitRequest.encode(req).finish().length;
    if (n > MAX_REQUEST) throw invalid(`request is ${n} bytes, over the maximum ${MAX_REQUEST}`);
  }
  return req;
}

/** decision converts ratelimitd's answer (to ShouldRateLimit or Acquire). */
function decision(resp) {
  const allowed = resp.code !== pb.Code.CODE_OVER_LIMIT;
  let retryAfterMs = 0;
  const statuses = resp.statuses.map((st) => {
    const s = {
      overLimit: st.code === pb.Code.CODE_OVER_LIMIT,
      limit: st.limit
        ? {
            name: st.limit.name,
            requests: st.limit.requests,
            windowMs: millis(st.limit.window),
            algorithm: ALGORITHMS[st.limit.algorithm] || '',
            burst: st.limit.burst,
          }
        : null,
      remaining: st.remaining,
      resetAfterMs: millis(st.resetAfter),
      retryAfterMs: millis(st.retryAfter),
      unlimited: st.unlimited,
    };
    if (!allowed && s.overLimit) retryAfterMs = Math.max(retryAfterMs, s.retryAfterMs);
    return s;
  });
  const headers = resp.headers.map((h) => ({ name: h.name, value: h.value }));
  return { allowed, statuses, retryAfterMs, headers, error: null, local: false };
}

/** monotonic is the default clock of the refusal memory: milliseconds that never go back. */
function monotonic() {
  return performance.now();
}

/** abortError returns the error a call rejects with when signal aborts it. */
function abortError(signal) {
  if (signal.reason instanceof Error) return signal.reason;
  const err = new Error('ratelimitd: the call was aborted');
  err.name = 'AbortError';
  return err;
}

/**
 * A Client asks ratelimitd's native API whether work may proceed. See
 * index.d.ts for the options.
 */
class Client {
  /**
   * @param {string | object} target ratelimitd's gRPC address
   *   ("127.0.0.1:8081"), or a RateLimitServiceClient of the stubs to use
   *   (the caller then keeps and closes it).
   * @param {object} [options]
   */
  constructor(target, options = {}) {
    this._timeoutMs = options.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : options.timeoutMs;
    this._failClosed = Boolean(options.failClosed);
    this._releaseTimeoutMs = RELEASE_TIMEOUT_MS; // tests shorten it
    this._autoRenew = Boolean(options.autoRenew);
    // Starts the timer of an auto-renewal (tests replace it); returns what clearTimeout takes.
    this._setTimer = (f, ms) => setTimeout(f, ms).unref();
    this._onDecision = options.onDecision || null;
    this._logger = options.logger || console;
    this._failOpens = 0;
    this._failures = 0;
    this._loggedUnimplemented = false;
    const cacheMs = options.refusalCacheMs === undefined ? DEFAULT_REFUSAL_CACHE_MS : options.refusalCacheMs;
    const cacheSize = options.refusalCacheSize === undefined ? DEFAULT_REFUSAL_CACHE_SIZE : options.refusalCacheSize;
    this._refusals = cacheMs > 0 && cacheSize > 0 ? new Refusals(cacheMs, cacheSize, options.clock || monotonic) : null;
    this._localRefusals = 0;
    if (typeof target === 'string') {
      this._target = target;
      this._rls = new pb.RateLimitServiceClient(
        target,
        options.credentials || grpc.credentials.createInsecure(),
        options.channelOptions || {},
      );
      this._owned = true;
    } else if (target && typeof target.shouldRateLimit === 'function') {
      this._target = typeof target.getChannel === 'function' ? target.getChannel().getTarget() : 'ratelimitd';
      this._rls = target;
      this._owned = false;
    } else {
      throw new TypeError('ratelimitd: Client wants an address or a RateLimitServiceClient');
    }
    // The connection: asked to connect now; calls wait for it (see
    // _connected). A stub without getChannel is used as it is.
    this._connectTimeoutMs =
      options.connectTimeoutMs === undefined ? DEFAULT_CONNECT_TIMEOUT_MS : options.connectTimeoutMs;
    this._channel = typeof this._rls.getChannel === 'function' ? this._rls.getChannel() : null;
    this._since = null; // when the current connection attempt began (performance.now), or null while ready
    this._watch = null; // {state, promise}: the one watch of the channel's state that waiting calls share
    if (this._channel && this._channel.getConnectivityState(true) !== READY) this._since = monotonic();
  }

  /** How many calls the failure policy allowed (fail open) since the Client was made. */
  get failOpens() {
    return this._failOpens;
  }

  /** How many calls the failure policy decided, open or closed. */
  get failures() {
    return this._failures;
  }

  /**
   * How many requests the Client refused by itself, from its memory of
   * refusals, without calling ratelimitd.
   */
  get localRefusals() {
    return this._localRefusals;
  }

  /**
   * shouldRateLimit asks whether the work described by descriptors may
   * proceed under the rules of domain. See index.d.ts.
   * @returns {Promise<object>} the Decision
   */
  async shouldRateLimit(domain, descriptors, callOptions = {}) {
    check(domain, descriptors);
    let key = null; // built only when needed: nothing remembered costs nothing
    let d = null;
    // A request that gives hits back is always sent: its give-backs apply
    // whatever it decides, and a refusal from memory would lose them.
    const givesBack = descriptors.some((x) => x.giveBack);
    if (this._refusals && this._refusals.length > 0 && !givesBack) {
      key = refusalKey(domain, descriptors);
      d = this._refusals.get(key);
      if (d) {
        this._localRefusals++;
        return this._hook(d, domain, descriptors);
      }
    }
    const req = request(domain, descriptors);
    ({ d } = await this._decide('shouldRateLimit', req, callOptions));
    // Only ratelimitd's refusals are remembered: the failure policy's have no retry-after.
    if (this._refusals && !d.allowed && d.error === null && d.retryAfterMs > 0 && !givesBack) {
      this._refusals.put(key === null ? refusalKey(domain, descriptors) : key, d);
    }
    return this._hook(d, domain, descriptors);
  }

  /**
   * _decide sends req to method (shouldRateLimit or acquire) within the
   * budget, once connected, and returns the decision (ratelimitd's, or
   * the failure policy's) and ratelimitd's answer (null when it failed).
   * It rejects when callOptions.signal aborts, and on INVALID_ARGUMENT.
   * @returns {Promise<{d: object, resp: object | null}>}
   */
  async _decide(method, req, callOptions) {
    const { signal } = callOptions;
    if (signal && signal.aborted) throw abortError(signal);
    const timeoutMs = this._budget(callOptions);
    await this._connected(signal);
    let resp;
    try {
      resp = await this._call(method, req, timeoutMs, signal);
    } catch (err) {
      if (signal && signal.aborted) throw abortError(signal);
      if (err.code === grpc.status.INVALID_ARGUMENT) throw err;
      if (err.code === grpc.status.UNIMPLEMENTED) this._logUnimplemented(method, err);
      this._failures++;
      if (!this._failClosed) this._failOpens++;
      const d = { allowed: !this._failClosed, statuses: [], retryAfterMs: 0, headers: [], error: err, local: false };
      return { d, resp: null };
    }
    return { d: decision(resp), resp };
  }

  /**
   * acquire takes slots of the concurrency limits of domain's rules that
   * descriptors match, and returns the Lease holding them. See index.d.ts.
   * @returns {Promise<Lease>}
   */
  async acquire(domain, descriptors, callOptions = {}) {
    check(domain, descriptors);
    descriptors.forEach((x, i) => {
      if (x.giveBack) throw invalid(`descriptor ${i}: giveBack in acquire`);
    });
    const req = pb.AcquireRequest.fromPartial({ domain, descriptors: request(domain, descriptors).descriptors });
    const { d, resp } = await this._decide('acquire', req, callOptions);
    const held = d.allowed && resp && resp.lease && resp.lease.id.length > 0 ? resp.lease : null;
    return new Lease(this, req, this._hook(d, domain, descriptors), held);
  }

  /**
   * _connected resolves once the channel is ready, in TRANSIENT_FAILURE
   * (ratelimitd refused or failed the handshake: the call fails at once,
   * and the failure policy decides) or shut down, or once the current
   * connection attempt's connect budget is spent; it rejects when signal
   * aborts first. An attempt, as the Client sees it, begins when it finds
   * the channel not ready (when made, or at a call after it was last seen
   * ready) and ends when it finds it ready: calls wait at most
   * connectTimeoutMs after it began, together, and once that is spent none
   * waits until the channel has been ready again.
   */
  async _connected(signal) {
    const ch = this._channel;
    if (!ch || !(this._connectTimeoutMs > 0)) return;
    let state = ch.getConnectivityState(false);
    if (state === READY) {
      this._since = null;
      return;
    }
    if (this._since === null) this._since = monotonic();
    for (;;) {
      if (state === READY) {
        this._since = null;
        return;
      }
      if (state === TRANSIENT_FAILURE || state === SHUTDOWN) return;
      if (state === IDLE) ch.getConnectivityState(true);
      const left = this._since + this._connectTimeoutMs - monotonic();
      if (left <= 0) return;
      await this._stateChange(ch, state, left, signal);
      state = ch.getConnectivityState(false);
    }
  }

  /**
   * _stateChange resolves when the channel leaves state or after leftMs,
   * and rejects when signal aborts first. Waiting calls share one watch
   * (one timer), which the channel's closing ends.
   */
  _stateChange(ch, state, leftMs, signal) {
    if (!this._watch || this._watch.state !== state) {
      const w = { state, promise: null };
      w.promise = new Promise((resolve) => {
        const done = () => {
          if (this._watch === w) this._watch = null;
          resolve();
        };
        try {
          ch.watchConnectivityState(state, Date.now() + leftMs, done);
        } catch {
          done(); // the channel is shut down
        }
      });
      this._watch = w;
    }
    const { promise } = this._watch;
    if (!signal) return promise;
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(abortError(signal));
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      promise.then(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  /** _hook calls the onDecision hook, if any, with d, and returns d. */
  _hook(d, domain, descriptors) {
    if (this._onDecision) {
      try {
        this._onDecision(d, { domain, descriptors });
      } catch (err) {
        this._logger.error(`ratelimitd: the onDecision hook threw: ${err && err.stack ? err.stack : err}`);
      }
    }
    return d;
  }

  /** _budget is a call's budget in milliseconds: callOptions.timeoutMs, else the Client's timeoutMs. */
  _budget(callOptions) {
    return callOptions.timeoutMs === undefined ? this._timeoutMs : callOptions.timeoutMs;
  }

  /** _call makes the RPC method, with a deadline timeoutMs away, cancelled by signal. */
  _call(method, req, timeoutMs, signal) {
    return new Promise((resolve, reject) => {
      const opts = timeoutMs > 0 ? { deadline: new Date(Date.now() + timeoutMs) } : {};
      let onAbort = null;
      const call = this._rls[method](req, new grpc.Metadata(), opts, (err, resp) => {
        if (onAbort) signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(resp);
      });
      if (signal) {
        onAbort = () => call.cancel();
        signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  /**
   * _logUnimplemented logs, once, at error (as the Go client does), that
   * the server does not serve the native API.
   */
  _logUnimplemented(method, err) {
    if (this._loggedUnimplemented) return;
    this._loggedUnimplemented = true;
    this._logger.error(
      `ratelimitd: ${this._target} answered UNIMPLEMENTED to ratelimit.v1.RateLimitService/${method[0].toUpperCase()}${method.slice(1)} ` +
        `(${err.details || err.message}): it does not serve ratelimitd's native API (or is a ratelimitd older than the method). ` +
        "Is it envoyproxy/ratelimit, which serves only Envoy's envoy.service.ratelimit.v3? Point this client at ratelimitd, or use the " +
        `package's envoy stubs. Until then every call fails ${this._failClosed ? 'closed (refused)' : 'open (allowed)'}.`,
    );
  }

  /**
   * waitForReady resolves once the connection to ratelimitd is up, or
   * rejects after timeoutMs. Calls need not: they wait for the connection
   * themselves, up to connectTimeoutMs; this is for start-up checks.
   * @param {number} [timeoutMs] 5000 by default
   */
  waitForReady(timeoutMs = 5000) {
    return new Promise((resolve, reject) => {
      this._rls.waitForReady(new Date(Date.now() + timeoutMs), (err) => (err ? reject(err) : resolve()));
    });
  }

  /** close closes the connection the Client made (not one it was given). */
  close() {
    if (this._owned) this._rls.close();
  }
}

/**
 * A Lease holds the slots one acquire took, until release gives them back
 * or the lease expires; renew extends it. See index.d.ts.
 */
class Lease {
  constructor(client, req, decision, lease) {
    this._client = client;
    this._req = req;
    /** The acquire's decision, as shouldRateLimit's. */
    this.decision = decision;
    this._hold(lease);
    this._ended = false; // released, or lost
    this._released = null; // the promise of the one release
    this._op = Promise.resolve(); // serializes release and renew
    // With autoRenew: the timer of the next renewal, and the renewal in flight's AbortController.
    this._timer = null;
    this._renewing = null;
    if (client._autoRenew && this._id !== null) this._keep(null);
  }

  /**
   * _keep schedules the next renewal halfway to the expiry (no sooner
   * than MIN_RENEW_WAIT_MS), after the failure last if any; once the
   * lease expired without a renewal, it logs it lost instead.
   */
  _keep(last) {
    if (this._ended || this._expiresAt === null) return;
    const left = this._expiresAt.getTime() - Date.now();
    if (last && left <= 0) {
      this._lost(last);
      return;
    }
    this._timer = this._client._setTimer(() => {
      this._timer = null;
      this._renewing = new AbortController();
      this.renew({ signal: this._renewing.signal }).then(
        () => this._keep(null),
        (err) => {
          if (this._released !== null) return; // released meanwhile
          if (err instanceof LeaseLostError) this._lost(err);
          else this._keep(err);
        },
      );
    }, Math.max(left / 2, MIN_RENEW_WAIT_MS));
  }

  _lost(err) {
    this._client._logger.warn(`ratelimitd: a lease held was lost; its slots may be held by others (domain ${this._req.domain}): ${err.message}`);
  }

  /** Whether the work may proceed: decision.allowed. */
  get allowed() {
    return this.decision.allowed;
  }

  /** When the slots free themselves unless renewed (ratelimitd's clock), or null when nothing is held. */
  get expiresAt() {
    return this._expiresAt;
  }

  _hold(lease) {
    this._id = lease ? lease.id : null;
    this._expiresAt = lease && lease.expiresAt ? lease.expiresAt : null;
  }

  /** _serial runs f once the operations before it have settled. */
  _serial(f) {
    const p = this._op.then(f);
    this._op = p.catch(() => {});
    return p;
  }

  /**
   * release gives the slots back, once: later calls return the first
   * one's promise. It waits for ratelimitd at most RELEASE_TIMEOUT_MS (1 s),
   * whatever aborted the acquire, and rejects with ratelimitd's error when
   * it could not be told (the slots then free themselves when the lease
   * expires).
   */
  release() {
    if (this._timer !== null) clearTimeout(this._timer);
    if (this._renewing !== null) this._renewing.abort(); // a renewal in flight gives up
    if (this._released === null) {
      this._released = this._serial(async () => {
        if (this._ended) return;
        this._ended = true;
        const id = this._id;
        if (id === null) return;
        this._hold(null);
        const { domain, descriptors } = this._req;
        await this._client._call('release', pb.ReleaseRequest.fromPartial({ domain, descriptors, leaseId: id }), this._client._releaseTimeoutMs);
      });
    }
    return this._released;
  }

  /**
   * renew extends the lease to a full lease from now; it rejects with a
   * LeaseLostError once the lease has expired or was released, and with ratelimitd's error when it could not be asked
   * within the budget (the lease then still ends at expiresAt).
   */
  renew(callOptions = {}) {
    return this._serial(async () => {
      if (this._ended) throw new LeaseLostError();
      const id = this._id;
      if (id === null) return;
      const { domain, descriptors } = this._req;
      const resp = await this._client._call(
        'renew',
        pb.RenewRequest.fromPartial({ domain, descriptors, leaseId: id }),
        this._client._budget(callOptions),
        callOptions.signal,
      );
      if (resp.code === pb.Code.CODE_OVER_LIMIT || !resp.lease) {
        this._ended = true;
        this._hold(null);
        throw new LeaseLostError();
      }
      this._hold(resp.lease);
    });
  }
}

/**
 * withSlot runs fn(lease) holding a slot of client.acquire(domain,
 * descriptors), and releases it in finally, whatever fn does. It rejects
 * with a SlotRefusedError, without calling fn, when the acquire is
 * refused. See index.d.ts.
 */
async function withSlot(client, domain, descriptors, fn, callOptions = {}) {
  const lease = await client.acquire(domain, descriptors, callOptions);
  try {
    if (!lease.allowed) throw new SlotRefusedError(lease.decision);
    return await fn(lease);
  } finally {
    try {
      await lease.release();
    } catch (err) {
      client._logger.warn(`ratelimitd: release failed; the slots free themselves when their lease expires: ${err.message}`);
    }
  }
}

module.exports = {
  Lease,
  withSlot,
  RELEASE_TIMEOUT_MS,
  check,
  wellFormed,
  MAX_DOMAIN,
  MAX_DESCRIPTORS,
  MAX_ENTRIES,
  Client,
  D,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REFUSAL_CACHE_MS,
  DEFAULT_REFUSAL_CACHE_SIZE,
};
