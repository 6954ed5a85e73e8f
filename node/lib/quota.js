'use strict';
// The quota mode, with the semantics of the Go client's Quota
// (github.com/ratelimitd/ratelimitd/client, quota.go): decisions made
// here, under the assignments ratelimitd sends over Envoy's Rate Limit
// Quota Service (RLQS, envoy.service.rate_limit_quota.v3), to which the
// Quota reports each bucket's use over one stream.

const grpc = require('@grpc/grpc-js');
const { BinaryReader, BinaryWriter } = require('@bufbuild/protobuf/wire');
const { rlqsV3 } = require('./stubs.js');
const { invalid, NoAssignmentError } = require('./errors.js');
// ratelimitd's bounds on a request, as the Client checks them.
const { wellFormed, MAX_DOMAIN, MAX_DESCRIPTORS, MAX_ENTRIES } = require('./client.js');

/** How often, by default, a Quota reports its buckets' use, in ms (ratelimitd's assignments then live twice as long). */
const DEFAULT_REPORTING_INTERVAL_MS = 5000;
/** How many buckets a Quota holds at most by default. */
const DEFAULT_QUOTA_MAX_BUCKETS = 10000;
/** How many reporting intervals a bucket may go unused before the Quota forgets it. */
const QUOTA_IDLE_INTERVALS = 3;

// Reconnection backoff of the reporting stream, in ms: doubling from
// BACKOFF_MIN to BACKOFF_MAX, each wait jittered by ±20%.
const BACKOFF_MIN = 100;
const BACKOFF_MAX = 10000;

// setInterval's longest delay.
const MAX_INTERVAL_MS = 0x7fffffff;

// Kinds of assignment.
const ALLOW_ALL = 0;
const DENY_ALL = 1;
const TOKEN_BUCKET = 2;

// Milliseconds per RateLimitUnit, from SECOND (1) to YEAR (6).
const UNIT_MS = [0, 1e3, 60e3, 3600e3, 86400e3, 30 * 86400e3, 365 * 86400e3];
// The longest duration read: a longer one reads as it.
const MAX_DURATION_MS = 100 * 365 * 86400e3;

const NO_ASSIGNMENT = new NoAssignmentError();

// Bucket ids are protobuf strings (a map<string, string>), but a value
// built from a request may hold any bytes, and ratelimitd reads and
// echoes them as bytes. Here such a value is a string that no UTF-8 can
// decode to: a lone surrogate (BYTES) and the bytes as latin1. The
// generated stubs read and write strings through utf8Codec, which maps
// that form to the bytes and back; well-formed strings go as UTF-8.
const BYTES = '\uDC00';
const encoder = new TextEncoder();
const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const utf8Codec = {
  /** encode returns the bytes of a protobuf string: UTF-8, or the bytes of a BYTES value. */
  encode(s) {
    if (s.charCodeAt(0) === 0xdc00) return Buffer.from(s.slice(1), 'latin1');
    return encoder.encode(s);
  },
  /** decode returns the string of a protobuf string's bytes: UTF-8, else a BYTES value. */
  decode(b) {
    try {
      return strict.decode(b);
    } catch {
      return BYTES + Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1');
    }
  },
};

/** serialize encodes a RateLimitQuotaUsageReports, bucket values of any bytes. */
function serialize(msg) {
  return Buffer.from(rlqsV3.RateLimitQuotaUsageReports.encode(msg, new BinaryWriter(utf8Codec.encode)).finish());
}

/** deserialize decodes a RateLimitQuotaResponse, bucket values of any bytes. */
function deserialize(buf) {
  return rlqsV3.RateLimitQuotaResponse.decode(new BinaryReader(buf, utf8Codec.decode));
}

/** The stream's method, as the stubs name it. */
const METHOD = rlqsV3.RateLimitQuotaServiceService.streamRateLimitQuotas.path;

/**
 * valueOf returns the bucket id's form of an entry's value: a string
 * (with its lone surrogates replaced, as UTF-8 sends them), bytes of
 * UTF-8 as their string, other bytes as a BYTES value.
 */
function valueOf(v) {
  if (typeof v === 'string') return wellFormed(v) ? v : v.toWellFormed();
  const b = Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  try {
    return strict.decode(b);
  } catch {
    return BYTES + b.toString('latin1');
  }
}

/**
 * bucketKey returns the Map key of a bucket id given as parallel arrays
 * of keys and values (its values in bucket id form): the same whatever
 * the order of its entries (a bucket id is a map), each string
 * length-prefixed.
 */
function bucketKey(keys, values) {
  const n = keys.length;
  if (n === 1) return `${keys[0].length}:${keys[0]}${values[0].length}:${values[0]}`;
  const order = [];
  for (let i = 0; i < n; i++) {
    let j = i;
    for (; j > 0 && keys[order[j - 1]] > keys[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  let k = '';
  for (const i of order) k += `${keys[i].length}:${keys[i]}${values[i].length}:${values[i]}`;
  return k;
}

/** millis converts a google.protobuf.Duration to ms: 0 when negative, at most 100 years. */
function millis(d) {
  if (!d || d.seconds < 0 || d.nanos < 0) return 0;
  return Math.min(d.seconds * 1000 + d.nanos / 1e6, MAX_DURATION_MS);
}

/** duration converts ms (not negative) to a google.protobuf.Duration. */
function duration(ms) {
  const ns = Math.round(Math.max(ms, 0) * 1e6);
  const seconds = Math.floor(ns / 1e9);
  return { seconds, nanos: ns - seconds * 1e9 };
}

/**
 * Tokens is a token bucket: perFill tokens every fill ms from base, up to
 * max, counted at whole fills (the same instants whoever asks).
 */
class Tokens {
  constructor(max, perFill, fill, base, n) {
    this.max = max;
    this.perFill = perFill;
    this.fill = fill;
    this.base = base;
    this.tokens = Math.min(n, max);
    this.last = 0; // the number of the last fill counted
  }

  /** take takes n tokens at now, after the fills due, and returns 0; or, when it holds fewer, the ms until its next fill. */
  take(n, now) {
    const at = Math.floor(Math.max(now - this.base, 0) / this.fill);
    if (at > this.last) {
      if (this.tokens < this.max && this.perFill > 0) this.tokens = Math.min(this.max, this.tokens + (at - this.last) * this.perFill);
      this.last = at;
    }
    if (this.tokens < n) return this.base + (Math.trunc((now - this.base) / this.fill) + 1) * this.fill - now;
    this.tokens -= n;
    return 0;
  }

  /** refund gives back n tokens taken. */
  refund(n) {
    this.tokens = Math.min(this.max, this.tokens + n);
  }
}

/**
 * parseAction reads a BucketAction into what a bucket applies: abandon,
 * an assignment (kind, its token bucket's parameters, expires in ms from
 * its receipt: Infinity without a time to live), or unknown (a strategy
 * the Quota cannot apply, or none: the failure policy decides).
 */
function parseAction(ba) {
  if (ba.abandonAction) return { abandon: true };
  const qa = ba.quotaAssignmentAction;
  const a = { abandon: false, unknown: true, kind: ALLOW_ALL, max: 0, perFill: 0, fill: 0, ttl: 0 };
  if (!qa) return a;
  a.ttl = millis(qa.assignmentTimeToLive);
  const st = qa.rateLimitStrategy;
  if (!st) return a;
  if (st.tokenBucket) {
    const tb = st.tokenBucket;
    a.kind = TOKEN_BUCKET;
    a.max = tb.maxTokens;
    a.perFill = tb.tokensPerFill === undefined ? 1 : tb.tokensPerFill; // the proto's default
    a.fill = millis(tb.fillInterval);
    a.unknown = !(a.fill > 0);
  } else if (st.requestsPerTimeUnit) {
    const { requestsPerTimeUnit: rate, timeUnit: unit } = st.requestsPerTimeUnit;
    a.unknown = !(unit >= 1 && unit < UNIT_MS.length);
    if (!a.unknown) Object.assign(a, { kind: TOKEN_BUCKET, max: rate, perFill: rate, fill: UNIT_MS[unit] });
  } else if (st.blanketRule !== undefined) {
    a.unknown = st.blanketRule !== ALLOW_ALL && st.blanketRule !== DENY_ALL;
    a.kind = st.blanketRule === ALLOW_ALL ? ALLOW_ALL : DENY_ALL;
  }
  return a;
}

/**
 * checkQuota throws INVALID_ARGUMENT for a malformed call: no
 * descriptors, over 64, a descriptor without entries or over 32, an
 * empty or ill-formed key, a key twice, a value neither a string nor
 * bytes, or a limit override (which RLQS cannot carry). It returns each
 * descriptor's bucket keys and values (values in bucket id form).
 */
function checkQuota(ds) {
  if (!Array.isArray(ds) || ds.length === 0 || ds.length > MAX_DESCRIPTORS) {
    throw invalid(`quota: ${Array.isArray(ds) ? ds.length : 'no'} descriptors, want 1 to ${MAX_DESCRIPTORS}`);
  }
  for (let i = 0; i < ds.length; i++) {
    const d = ds[i];
    const entries = d && d.entries;
    if (!Array.isArray(entries) || entries.length === 0 || entries.length > MAX_ENTRIES) {
      throw invalid(`quota: descriptor ${i} has ${Array.isArray(entries) ? entries.length : 'no'} entries, want 1 to ${MAX_ENTRIES}`);
    }
    if (d.limit != null) throw invalid(`quota: descriptor ${i} has a limit override, which a Quota cannot apply`);
    if (!d.checkOnly && d.hits !== undefined && !(Number.isInteger(d.hits) && d.hits >= 0 && d.hits <= 0xffffffff)) {
      throw invalid(`quota: descriptor ${i}: hits ${d.hits} is not an integer from 0 to 4294967295`);
    }
    for (let j = 0; j < entries.length; j++) {
      const e = entries[j];
      const key = e && e.key;
      if (typeof key !== 'string' || key === '') throw invalid(`quota: descriptor ${i} entry ${j} has an empty key`);
      // A key must decode back to itself: no lone surrogate; and
      // "__proto__" cannot be a key of the stubs' map objects.
      if (!wellFormed(key) || key === '__proto__') throw invalid(`quota: descriptor ${i} entry ${j}: key ${JSON.stringify(key)} cannot be a bucket id's`);
      if (typeof e.value !== 'string' && !(e.value instanceof Uint8Array)) {
        throw invalid(`quota: descriptor ${i} entry ${j}: value is neither a string nor bytes`);
      }
      for (let k = 0; k < j; k++) {
        if (entries[k].key === key) {
          throw invalid(`quota: descriptor ${i} repeats key ${JSON.stringify(key)} (entries ${k} and ${j}): a bucket id is a map`);
        }
      }
    }
  }
}

/**
 * A Quota decides locally whether work may proceed, under the
 * assignments ratelimitd sends over RLQS. See index.d.ts.
 */
class Quota {
  /**
   * @param {string | grpc.Client} target ratelimitd's gRPC address, or a
   *   grpc-js client (such as the stubs' RateLimitQuotaServiceClient) whose
   *   channel to use, which the caller keeps and closes after close().
   * @param {object} options see index.d.ts (QuotaOptions)
   */
  constructor(target, options = {}) {
    const o = options || {};
    const domain = o.domain;
    if (typeof domain !== 'string' || domain === '' || Buffer.byteLength(domain) > MAX_DOMAIN || !wellFormed(domain)) {
      throw invalid(`Quota: domain ${JSON.stringify(domain)}: want 1 to ${MAX_DOMAIN} bytes of UTF-8`);
    }
    const interval = o.reportingIntervalMs === undefined || o.reportingIntervalMs === 0 ? DEFAULT_REPORTING_INTERVAL_MS : o.reportingIntervalMs;
    if (typeof interval !== 'number' || !(interval >= 1 && interval <= MAX_INTERVAL_MS)) {
      throw invalid(`Quota: reportingIntervalMs ${o.reportingIntervalMs}: want 1 to ${MAX_INTERVAL_MS} (0: ${DEFAULT_REPORTING_INTERVAL_MS})`);
    }
    const maxBuckets = o.maxBuckets === undefined || o.maxBuckets === 0 ? DEFAULT_QUOTA_MAX_BUCKETS : o.maxBuckets;
    if (!Number.isInteger(maxBuckets) || maxBuckets < 1) {
      throw invalid(`Quota: maxBuckets ${o.maxBuckets}: want a positive integer (0: ${DEFAULT_QUOTA_MAX_BUCKETS})`);
    }
    this._domain = domain;
    this._interval = interval;
    this._failClosed = Boolean(o.failClosed);
    this._maxBuckets = maxBuckets;
    this._logger = o.logger || console;
    this._now = o.clock || (() => performance.now());
    if (typeof target === 'string') {
      this._rpc = new grpc.Client(target, o.credentials || grpc.credentials.createInsecure(), o.channelOptions || {});
      this._owned = true;
    } else if (target && typeof target.makeBidiStreamRequest === 'function') {
      this._rpc = target;
      this._owned = false;
    } else {
      throw new TypeError('ratelimitd: Quota wants an address or a @grpc/grpc-js Client');
    }
    /** @type {Map<string, object>} the buckets held, by bucketKey */
    this._buckets = new Map();
    this._failOpens = 0;
    this._overflows = 0;
    this._closed = false;
    this._gen = 0; // the stream's generation: reports name the domain again on each
    this._call = null;
    this._ticker = null;
    this._retry = null; // the backoff's timer
    this._wait = BACKOFF_MIN;
    this._wake = null; // the immediate reporting new buckets
    this._open();
  }

  /** The domain whose rules decide. */
  get domain() {
    return this._domain;
  }

  /** How many calls the failure policy allowed (a bucket without an assignment in force, or past maxBuckets) when failing open. */
  get failOpens() {
    return this._failOpens;
  }

  /** How many calls found no room for a new bucket (maxBuckets held): the failure policy decided it. */
  get overflows() {
    return this._overflows;
  }

  /** How many buckets the Quota holds. */
  get size() {
    return this._buckets.size;
  }

  /**
   * allow reports whether the work described by descriptors may proceed,
   * deciding locally: see index.d.ts.
   * @returns {boolean}
   */
  allow(descriptors) {
    return this._decide(descriptors, null);
  }

  /**
   * shouldRateLimit is allow as a RateLimiter (the middleware's): see
   * index.d.ts.
   */
  async shouldRateLimit(domain, descriptors) {
    if (domain !== this._domain) {
      throw invalid(`quota: domain ${JSON.stringify(domain)} is not the Quota's ${JSON.stringify(this._domain)}`);
    }
    const v = { policy: false, refused: -1, retry: 0 };
    const allowed = this._decide(descriptors, v);
    const d = { allowed, statuses: [], retryAfterMs: 0, headers: [], error: null, local: true };
    if (v.policy) {
      d.error = NO_ASSIGNMENT;
    } else if (!allowed) {
      d.retryAfterMs = v.retry;
      d.statuses = descriptors.map((_, i) => ({
        overLimit: i === v.refused,
        limit: null,
        remaining: 0,
        resetAfterMs: 0,
        retryAfterMs: i === v.refused ? v.retry : 0,
        unlimited: false,
      }));
    }
    return d;
  }

  /**
   * _decide decides a call: it looks up every descriptor's bucket
   * (creating it, and so reporting it, even when an earlier one refuses),
   * then takes from each in order, giving back what it took when one
   * refuses. It notes in v, when given, whether the failure policy
   * decided, which descriptor refused, and the ms until the refusing
   * token bucket's next fill.
   */
  _decide(ds, v) {
    checkQuota(ds);
    const now = this._now();
    const n = ds.length;
    const buckets = new Array(n);
    for (let i = 0; i < n; i++) buckets[i] = this._lookup(ds[i].entries, now);
    let allowed = true;
    let policy = false;
    let refused = -1;
    let retry = 0;
    for (let i = 0; i < n; i++) {
      const b = buckets[i];
      const a = b !== null && b.a !== null && now < b.a.expires ? b.a : null;
      let ok;
      if (a === null) {
        policy = true;
        ok = !this._failClosed;
      } else if (a.kind === ALLOW_ALL) {
        ok = true;
      } else if (a.kind === DENY_ALL) {
        policy = false;
        ok = false;
      } else {
        const r = a.tb.take(hitsOf(ds[i]), now);
        ok = r === 0;
        if (!ok) {
          policy = false;
          retry = r;
        }
      }
      if (!ok) {
        allowed = false;
        refused = i;
        for (let j = 0; j < i; j++) {
          const bj = buckets[j];
          if (bj !== null && bj.a !== null && bj.a.kind === TOKEN_BUCKET && now < bj.a.expires) bj.a.tb.refund(hitsOf(ds[j]));
        }
        break;
      }
    }
    for (let i = 0; i < n; i++) {
      const b = buckets[i];
      if (b === null) continue;
      b.used = true;
      if (allowed) b.allowed += hitsOf(ds[i]);
      else b.denied += hitsOf(ds[i]);
    }
    if (policy && allowed) this._failOpens++;
    if (v !== null) {
      v.policy = policy;
      v.refused = refused;
      v.retry = retry;
    }
    return allowed;
  }

  /**
   * _lookup returns the bucket whose id is entries, creating it (and
   * reporting it at once) when there is none; null past maxBuckets.
   */
  _lookup(entries, now) {
    const keys = new Array(entries.length);
    const values = new Array(entries.length);
    for (let i = 0; i < entries.length; i++) {
      keys[i] = entries[i].key;
      values[i] = valueOf(entries[i].value);
    }
    const key = bucketKey(keys, values);
    const b = this._buckets.get(key);
    if (b !== undefined) return b;
    if (this._buckets.size >= this._maxBuckets) {
      this._overflows++;
      return null;
    }
    const id = Object.create(null);
    for (let i = 0; i < keys.length; i++) id[keys[i]] = values[i];
    const nb = { key, id, a: null, allowed: 0, denied: 0, used: false, reportedOn: 0, lastReport: now, idle: 0 };
    this._buckets.set(key, nb);
    if (this._wake === null && this._call !== null) {
      this._wake = setImmediate(() => {
        this._wake = null;
        this._send(false);
      });
    }
    return nb;
  }

  /** _apply applies the actions of a RateLimitQuotaResponse to the buckets still held. */
  _apply(resp) {
    const now = this._now();
    for (const ba of resp.bucketAction) {
      const id = ba.bucketId ? ba.bucketId.bucket : {};
      const keys = Object.keys(id);
      if (keys.length === 0) continue;
      const b = this._buckets.get(bucketKey(keys, keys.map((k) => id[k])));
      if (b === undefined) continue;
      const a = parseAction(ba);
      if (a.abandon) {
        this._buckets.delete(b.key);
        continue;
      }
      if (a.unknown) {
        b.a = null;
        continue;
      }
      const next = { kind: a.kind, expires: a.ttl > 0 ? now + a.ttl : Infinity, tb: null };
      if (a.kind === TOKEN_BUCKET) next.tb = nextTokens(b.a, a, now);
      b.a = next;
    }
  }

  /**
   * _open opens a stream (generation _gen): it reports every bucket at
   * once (the first report naming the domain), a new bucket as soon as it
   * is used, and every bucket each interval, and applies the answers.
   * The stream waits for the connection (waitForReady), rather than
   * failing while it reconnects.
   */
  _open() {
    if (this._closed) return;
    this._gen++;
    this._domainSent = false;
    this._answered = false;
    const call = this._rpc.makeBidiStreamRequest(METHOD, serialize, deserialize, new grpc.Metadata({ waitForReady: true }));
    this._call = call;
    call.on('data', (resp) => {
      if (this._call !== call) return;
      this._answered = true;
      this._apply(resp);
    });
    call.on('error', (err) => this._failed(call, err));
    call.on('end', () => this._failed(call, new Error('ratelimitd ended the stream')));
    this._ticker = setInterval(() => this._send(true), this._interval);
    this._ticker.unref();
    this._send(false);
  }

  /**
   * _send reports the buckets' use on the current stream: all of them
   * when all is set (forgetting those idle for QUOTA_IDLE_INTERVALS
   * intervals), else those not yet reported on it. While the stream's
   * buffer is full (ratelimitd does not read), nothing is sent: the
   * counts wait in the buckets.
   */
  _send(all) {
    const call = this._call;
    if (call === null || call.writableNeedDrain) return;
    const gen = this._gen;
    const now = this._now();
    const usages = [];
    for (const b of this._buckets.values()) {
      if (!all && b.reportedOn === gen) continue;
      const u = {
        bucketId: { bucket: b.id },
        // ratelimitd takes a bucket's last time_elapsed as the client's
        // reporting interval, and sizes the assignment's time to live from
        // it: a bucket's first report gives the interval itself.
        timeElapsed: duration(b.reportedOn === 0 ? this._interval : now - b.lastReport),
        numRequestsAllowed: b.allowed,
        numRequestsDenied: b.denied,
      };
      b.allowed = 0;
      b.denied = 0;
      if (all) {
        if (b.used) {
          b.used = false;
          b.idle = 0;
        } else if (++b.idle >= QUOTA_IDLE_INTERVALS) {
          this._buckets.delete(b.key);
          continue;
        }
      }
      b.reportedOn = gen;
      b.lastReport = now;
      usages.push(u);
    }
    if (usages.length === 0 && this._domainSent) return;
    call.write({ domain: this._domainSent ? '' : this._domain, bucketQuotaUsages: usages });
    this._domainSent = true;
  }

  /** _failed ends the stream call after its failure, and opens another after the backoff. */
  _failed(call, err) {
    if (this._call !== call) return;
    this._stop();
    if (this._closed) return;
    if (this._answered) this._wait = BACKOFF_MIN;
    const wait = this._wait;
    this._logger.warn(
      `ratelimitd quota: the RLQS stream of domain ${JSON.stringify(this._domain)} failed (${err && err.message}); ` +
        `assignments keep until they expire, then the failure policy decides; retrying in ${wait} ms`,
    );
    this._retry = setTimeout(() => {
      this._retry = null;
      this._open();
    }, wait * (0.8 + 0.4 * Math.random()));
    this._retry.unref();
    this._wait = Math.min(2 * wait, BACKOFF_MAX);
  }

  /** _stop ends the current stream, if any, and its timers. */
  _stop() {
    const call = this._call;
    this._call = null;
    clearInterval(this._ticker);
    this._ticker = null;
    if (this._wake !== null) clearImmediate(this._wake);
    this._wake = null;
    if (call !== null) call.cancel();
  }

  /**
   * close ends the reporting stream and its timers, and closes the
   * connection the Quota made (not one it was given). Assignments
   * received still decide until they expire; new buckets get the failure
   * policy.
   */
  close() {
    if (this._closed) return;
    this._closed = true;
    this._stop();
    clearTimeout(this._retry);
    this._retry = null;
    if (this._owned) this._rpc.close();
  }
}

/** hitsOf returns what descriptor d takes: 0 when checkOnly, else its hits (0 or absent: 1). */
function hitsOf(d) {
  return d.checkOnly ? 0 : d.hits || 1;
}

/**
 * nextTokens returns the token bucket of assignment a, whose bucket's
 * assignment was old: old's own when a's parameters are the same (a
 * renewal), else a new one holding old's tokens (none over a's max), or
 * full without one.
 */
function nextTokens(old, a, now) {
  if (old === null || old.tb === null) return new Tokens(a.max, a.perFill, a.fill, now, a.max);
  const t = old.tb;
  if (t.max === a.max && t.perFill === a.perFill && t.fill === a.fill) return t;
  return new Tokens(a.max, a.perFill, a.fill, now, t.tokens);
}

module.exports = {
  Quota,
  DEFAULT_REPORTING_INTERVAL_MS,
  DEFAULT_QUOTA_MAX_BUCKETS,
  QUOTA_IDLE_INTERVALS,
  // For the tests.
  internal: { Tokens, serialize, deserialize, utf8Codec, parseAction, METHOD, BYTES },
};
