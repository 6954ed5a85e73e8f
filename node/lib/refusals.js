'use strict';
// The Client's memory of refusals, as the Go client's (refusals.go) and the
// Python package's: a request ratelimitd refused with a retry-after of T is
// refused again by the Client itself for min(T, maxAgeMs), without a call.

const crypto = require('node:crypto');
const { MAX_VALUE, utf8, seconds } = require('./util.js');

/** The default longest time a refusal is remembered, in milliseconds. */
const DEFAULT_REFUSAL_CACHE_MS = 1000;
/** The default most refusals remembered. */
const DEFAULT_REFUSAL_CACHE_SIZE = 10000;

// How many refusals evict examines without a full sweep.
const EVICT_SAMPLE = 16;
// The most digits of a Structured Fields Integer (RFC 9651 section 3.3.1).
const MAX_DIGITS = 15;

/** digest returns the SHA-256 digest of b, a string (as UTF-8) or bytes, as 32 latin1 characters. */
function digest(b) {
  return crypto.createHash('sha256').update(b).digest('latin1');
}

/**
 * valueKey returns the part of a refusal key of one value: over 1024 bytes,
 * "#" and its digest; else a string, or bytes that are UTF-8, as that
 * string, length-prefixed and ":"; else the bytes as latin1,
 * length-prefixed and "b".
 */
function valueKey(v) {
  if (typeof v === 'string') {
    // A string of n UTF-16 units is at most 3n bytes of UTF-8.
    if (v.length * 3 <= MAX_VALUE || Buffer.byteLength(v) <= MAX_VALUE) return `${v.length}:${v}`;
    return `#${digest(v)}`;
  }
  const b = Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (b.length > MAX_VALUE) return `#${digest(b)}`;
  try {
    const s = utf8.decode(b);
    return `${s.length}:${s}`;
  } catch {
    return `${b.length}b${b.toString('latin1')}`;
  }
}

/**
 * refusalKey returns an unambiguous key of a request (checked by check):
 * the domain, and for each descriptor its entries (every string
 * length-prefixed; a value over 1024 bytes by its SHA-256 digest, as
 * ratelimitd counts it, so that a remembered refusal stays small), its
 * hits as sent (0 for checkOnly, else at least 1) and its limit override
 * as sent. A string value and bytes of the same UTF-8 share a key, as they
 * share a counter.
 */
function refusalKey(domain, descriptors) {
  let k = `${domain.length}:${domain}${descriptors.length};`;
  for (const d of descriptors) {
    k += `${d.entries.length};`;
    for (const e of d.entries) k += `${e.key.length}:${e.key}${valueKey(e.value)}`;
    const hits = d.checkOnly ? 0 : Math.max(d.hits || 1, 1);
    const limit = d.limit != null ? `${d.limit.requests}/${Math.round(d.limit.windowMs * 1000)}` : '-';
    k += `${hits};${limit};`;
  }
  return k;
}

/** cloneDecision returns a copy of d that shares nothing mutable with it. */
function cloneDecision(d) {
  return {
    ...d,
    statuses: d.statuses.map((s) => ({ ...s, limit: s.limit ? { ...s.limit } : null })),
    headers: d.headers.map((h) => ({ ...h })),
  };
}

/**
 * Refusals are remembered refusals: at most size, each for
 * min(retryAfterMs, maxAgeMs) milliseconds of clock(), a monotonic clock
 * in milliseconds.
 */
class Refusals {
  constructor(maxAgeMs, size, clock) {
    this.maxAgeMs = maxAgeMs;
    this.size = size;
    this.clock = clock;
    /** @type {Map<string, {at: number, expires: number, d: object}>} in insertion order */
    this._m = new Map();
    this._swept = -Infinity;
  }

  /** How many refusals are remembered. */
  get length() {
    return this._m.size;
  }

  /**
   * get returns the refusal remembered under key, counted down to now
   * (its durations, in its statuses and its headers: see localHeaders),
   * with local set; or null.
   */
  get(key) {
    const f = this._m.get(key);
    if (!f) return null;
    const now = this.clock();
    if (now >= f.expires) {
      this._m.delete(key);
      return null;
    }
    const elapsed = Math.max(now - f.at, 0);
    const d = cloneDecision(f.d);
    d.local = true;
    d.retryAfterMs = Math.max(d.retryAfterMs - elapsed, 0);
    for (const s of d.statuses) {
      s.resetAfterMs = Math.max(s.resetAfterMs - elapsed, 0);
      s.retryAfterMs = Math.max(s.retryAfterMs - elapsed, 0);
    }
    d.headers = localHeaders(d.headers, elapsed, d.retryAfterMs);
    return d;
  }

  /**
   * put remembers the refusal d, made now, under key (a copy: the caller
   * keeps d). When full, it forgets expired refusals first (see evict).
   */
  put(key, d) {
    const now = this.clock();
    const f = { at: now, expires: now + Math.min(d.retryAfterMs, this.maxAgeMs), d: cloneDecision(d) };
    if (!this._m.has(key) && this._m.size >= this.size) this._evict(now);
    this._m.set(key, f);
  }

  /**
   * _evict makes room for one refusal: it forgets the expired ones, all of
   * them at most once per maxAgeMs (so that a memory full of live
   * refusals costs no repeated sweeps), else those among the oldest few;
   * and if none of those expired, the oldest.
   */
  _evict(now) {
    if (now - this._swept >= this.maxAgeMs) {
      this._swept = now;
      for (const [k, f] of this._m) {
        if (now >= f.expires) this._m.delete(k);
      }
      if (this._m.size < this.size) return;
    }
    let first = null;
    let n = 0;
    let freed = false;
    for (const [k, f] of this._m) {
      if (n === 0) first = k;
      if (now >= f.expires) {
        this._m.delete(k);
        freed = true;
      }
      if (++n === EVICT_SAMPLE) break;
    }
    if (!freed && first !== null) this._m.delete(first);
  }
}

/** deltaSeconds returns s as a number of seconds (1 to 15 digits, nothing else), or null. */
function deltaSeconds(s) {
  if (s.length === 0 || s.length > MAX_DIGITS || !/^[0-9]+$/.test(s)) return null;
  return Number(s);
}

/**
 * localHeaders returns a copy of hs, the headers of a refusal made
 * elapsedMs ago, with what counts down counted down:
 *
 * - Retry-After, in delta-seconds, becomes retryAfterMs (the refusal's,
 *   counted down) in seconds, rounded up, at least 1, as ratelimitd
 *   computes it (an HTTP-date, which does not go stale, is kept);
 * - each t parameter of the IETF RateLimit field's top-level members
 *   (such as "name";r=0;t=45), and the legacy RateLimit-Reset, lose the
 *   whole seconds elapsed (rounded down), not below 0. ratelimitd rounded
 *   them up from its reset times, so the results are those times, counted
 *   down and rounded up, or at most a second more: never less.
 *
 * Header names match in any case; the rest is kept as it is.
 */
function localHeaders(hs, elapsedMs, retryAfterMs) {
  const secs = Math.floor(Math.max(elapsedMs, 0) / 1000);
  return hs.map(({ name, value }) => {
    const low = name.toLowerCase();
    if (low === 'retry-after') {
      if (deltaSeconds(value) !== null) value = String(Math.max(seconds(retryAfterMs), 1));
    } else if (low === 'ratelimit') {
      value = countDownT(value, secs);
    } else if (low === 'ratelimit-reset') {
      const n = deltaSeconds(value);
      if (n !== null && secs > 0 && n > 0) value = String(Math.max(n - secs, 0));
    }
    return { name, value };
  });
}

/** isDigit reports whether c, one character, is a decimal digit. */
function isDigit(c) {
  return c >= '0' && c <= '9';
}

/**
 * countDownT returns v, a Structured Fields List (the IETF RateLimit
 * field), with each non-negative Integer parameter named t of its
 * top-level members lowered by secs, not below 0. Strings (whose quotes
 * and escapes it skips), inner lists, other parameters, negative or
 * non-Integer t are copied unchanged.
 */
function countDownT(v, secs) {
  if (secs <= 0) return v;
  let out = '';
  let last = 0; // v.slice(last) is not yet in out
  let depth = 0; // of inner lists
  const n = v.length;
  for (let i = 0; i < n; i++) {
    const c = v[i];
    if (c === '"') {
      for (i++; i < n && v[i] !== '"'; i++) {
        if (v[i] === '\\') i++;
      }
    } else if (c === '(') {
      depth++;
    } else if (c === ')') {
      depth = Math.max(depth - 1, 0);
    } else if (c === ';' && depth === 0) {
      let j = i + 1;
      while (j < n && v[j] === ' ') j++;
      if (j + 1 >= n || v[j] !== 't' || v[j + 1] !== '=') continue;
      const start = j + 2;
      let end = start;
      while (end < n && end - start <= MAX_DIGITS && isDigit(v[end])) end++;
      if (end === start || end - start > MAX_DIGITS || (end < n && !';, \t)'.includes(v[end]))) continue;
      const t = Number(v.slice(start, end));
      const nt = Math.max(t - secs, 0);
      if (nt !== t) {
        out += v.slice(last, start) + String(nt);
        last = end;
      }
      i = end - 1;
    }
  }
  if (last === 0) return v;
  return out + v.slice(last);
}

module.exports = {
  Refusals,
  refusalKey,
  localHeaders,
  countDownT,
  DEFAULT_REFUSAL_CACHE_MS,
  DEFAULT_REFUSAL_CACHE_SIZE,
};
