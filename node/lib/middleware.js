'use strict';
// An Express-style (req, res, next) middleware asking ratelimitd whether
// each HTTP request may proceed, mirroring the Go client's
// HTTPMiddleware: the same descriptors, headers and answers. It needs no
// framework: with node:http, call it as middleware(req, res, () => handler(req, res)).

const http = require('node:http');
const ip = require('./ip.js');
const { utf8, seconds } = require('./util.js');

/** The problem type (RFC 9457) of the 429 body. */
const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';

/** header returns the first value of the request header name, or ''. */
function header(req, name) {
  const lower = name.toLowerCase();
  // Node joins repeated fields with ", "; Go's Header.Get takes the first.
  if (req.headersDistinct && req.headersDistinct[lower]) return req.headersDistinct[lower][0];
  const v = req.headers[lower];
  if (Array.isArray(v)) return v[0] || '';
  return v || '';
}

/** headerList returns all the values of the request header name, in order. */
function headerList(req, name) {
  const lower = name.toLowerCase();
  if (req.headersDistinct && req.headersDistinct[lower]) return req.headersDistinct[lower];
  const v = req.headers[lower];
  if (v === undefined) return [];
  return Array.isArray(v) ? v : [v];
}

/**
 * forwardedFor returns the for= value of each element of the Forwarded
 * field values (RFC 7239 §4), unquoted, in order; '' for an element
 * without one, or a malformed one.
 */
function forwardedFor(values) {
  const nodes = [];
  for (const v of values) {
    let i = 0;
    while (i <= v.length) {
      let node = '';
      for (;;) {
        while (i < v.length && (v[i] === ' ' || v[i] === '\t' || v[i] === ';')) i++;
        if (i >= v.length || v[i] === ',') break;
        const rest = v.slice(i);
        const eq = rest.search(/[=,;]/);
        if (eq < 0 || rest[eq] !== '=') {
          node = '';
          i = skipElement(v, i);
          break;
        }
        const key = rest.slice(0, eq).trim();
        i += eq + 1;
        const pv = pairValue(v.slice(i));
        if (!pv) {
          node = '';
          i = skipElement(v, i);
          break;
        }
        i += pv.n;
        if (key.toLowerCase() === 'for') node = pv.val;
      }
      nodes.push(node);
      i++; // past ',' (or the end)
    }
  }
  return nodes;
}

/** pairValue parses a token or quoted-string at the start of s. */
function pairValue(s) {
  if (s === '' || s[0] !== '"') {
    let end = s.search(/[;, \t]/);
    if (end < 0) end = s.length;
    return { val: s.slice(0, end), n: end };
  }
  let val = '';
  for (let i = 1; i < s.length; i++) {
    if (s[i] === '\\') {
      i++;
      if (i === s.length) return null;
      val += s[i];
    } else if (s[i] === '"') {
      return { val, n: i + 1 };
    } else {
      val += s[i];
    }
  }
  return null; // unterminated
}

/** skipElement returns the index of the ',' ending the element at i, or v.length. */
function skipElement(v, i) {
  let quoted = false;
  for (; i < v.length; i++) {
    const c = v[i];
    if (quoted && c === '\\') i++;
    else if (c === '"') quoted = !quoted;
    else if (!quoted && c === ',') return i;
  }
  return v.length;
}

/**
 * clientAddr returns the client's address bytes of req, or null (see
 * clientIP).
 */
function clientAddr(req, proxyHeader, trusted) {
  const peer = ip.parseNode((req.socket && req.socket.remoteAddress) || '');
  if (!peer || !trusted.some((p) => ip.contains(p, peer))) return peer;
  const values = headerList(req, proxyHeader);
  const nodes = proxyHeader.toLowerCase() === 'forwarded' ? forwardedFor(values) : values.flatMap((v) => v.split(','));
  let a = peer;
  for (let i = nodes.length - 1; i >= 0; i--) {
    const n = ip.parseNode(nodes[i]);
    if (!n) break; // no proxy vouches for what lies beyond
    a = n;
    if (!trusted.some((p) => ip.contains(p, n))) break;
  }
  return a;
}

/**
 * clientIP returns the IP address of req's client as a string, or null
 * when unknown (a peer that is not an IP address, as on a Unix socket).
 * When the connection's peer is in none of the trusted prefixes it is the
 * peer, and no header is read; else the right-most address of
 * proxyHeader (X-Forwarded-For by default, or Forwarded) that is not
 * trusted.
 * @param {import('node:http').IncomingMessage} req
 * @param {{ trustedProxies?: string[], proxyHeader?: string }} [options]
 */
function clientIP(req, options = {}) {
  const trusted = (options.trustedProxies || []).map(ip.parsePrefix);
  const a = clientAddr(req, options.proxyHeader || 'X-Forwarded-For', trusted);
  return a && ip.format(a);
}

/**
 * requestPath returns req's path, percent-decoded as Go's URL.Path is: a
 * string when the bytes are valid UTF-8, else a Buffer.
 */
function requestPath(req) {
  let u = req.originalUrl || req.url || '/';
  if (!u.startsWith('/')) {
    try {
      u = new URL(u).pathname; // absolute-form request target
    } catch {
      return u;
    }
  }
  const q = u.search(/[?#]/);
  if (q >= 0) u = u.slice(0, q);
  if (!u.includes('%')) return u;
  const bytes = [];
  const raw = Buffer.from(u, 'utf8');
  for (let i = 0; i < raw.length; i++) {
    const hex = raw.toString('latin1', i + 1, i + 3);
    if (raw[i] === 0x25 && /^[0-9a-fA-F]{2}$/.test(hex)) {
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else {
      bytes.push(raw[i]);
    }
  }
  const b = Buffer.from(bytes);
  try {
    return utf8.decode(b);
  } catch {
    return b;
  }
}

/**
 * headerBytes returns a request header's value as Go and Python send it:
 * Node reads the field's bytes as latin1, one character a byte, so a value
 * with a character over 0x7F goes as those bytes, not re-encoded as UTF-8.
 */
function headerBytes(v) {
  return /[^\x00-\x7f]/.test(v) ? Buffer.from(v, 'latin1') : v;
}

/**
 * sendable reports whether Node would accept name and value as a response
 * header (no ERR_INVALID_HTTP_TOKEN, no ERR_INVALID_CHAR).
 */
function sendable(name, value) {
  try {
    http.validateHeaderName(name);
    http.validateHeaderValue(name, value);
    return true;
  } catch {
    return false;
  }
}

/** addHeader adds a response header, keeping the values already set. */
function addHeader(res, name, value) {
  if (typeof res.appendHeader === 'function') {
    res.appendHeader(name, value);
    return;
  }
  const prev = res.getHeader(name);
  if (prev === undefined) res.setHeader(name, value);
  else res.setHeader(name, [].concat(prev, value));
}

/** setXRateLimit sets the X-RateLimit headers of the tightest limit of statuses. */
function setXRateLimit(res, statuses) {
  let tight = null;
  for (const s of statuses) {
    if (!s.limit || s.unlimited) continue;
    if (!tight) {
      tight = s;
      continue;
    }
    if (s.overLimit && (!tight.overLimit || s.retryAfterMs > tight.retryAfterMs)) tight = s;
    else if (!s.overLimit && !tight.overLimit && s.remaining < tight.remaining) tight = s;
  }
  if (!tight) return;
  res.setHeader('X-RateLimit-Limit', String(tight.limit.requests));
  res.setHeader('X-RateLimit-Remaining', String(tight.remaining));
  res.setHeader('X-RateLimit-Reset', String(seconds(tight.resetAfterMs)));
}

/** goJSON escapes what Go's encoding/json escapes and JSON.stringify does not. */
function goJSON(v) {
  return JSON.stringify(v).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * answered reports whether res can take no more headers: another handler
 * already sent them, or ended the response.
 */
function answered(res) {
  return res.headersSent || res.writableEnded;
}

/** writeError answers as Go's http.Error does: plain text, nosniff. */
function writeError(res, code, msg) {
  if (answered(res)) {
    if (!res.writableEnded) res.end();
    return;
  }
  res.removeHeader('Content-Length');
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.statusCode = code;
  res.end(`${msg}\n`);
}

/** writeRefusal answers a refusal: 429, Retry-After, problem+json. */
function writeRefusal(res, d) {
  const retry = Math.max(seconds(d.retryAfterMs), 1);
  const p = {
    type: QUOTA_EXCEEDED,
    title: 'Request cannot be satisfied as assigned quota has been exceeded',
    status: 429,
    detail: `Too many requests; retry in ${retry} s.`,
  };
  const violated = [];
  for (const s of d.statuses) {
    if (s.overLimit && s.limit && s.limit.name !== '' && !violated.includes(s.limit.name)) violated.push(s.limit.name);
  }
  if (violated.length > 0) p['violated-policies'] = violated;
  if (answered(res)) {
    if (!res.writableEnded) res.end();
    return;
  }
  res.setHeader('Retry-After', String(retry));
  res.setHeader('Content-Type', 'application/problem+json');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.removeHeader('Content-Length');
  res.statusCode = 429;
  res.end(`${goJSON(p)}\n`);
}

/**
 * middleware returns an Express-style (req, res, next) middleware asking
 * client, under the rules of domain, whether each request may proceed.
 * See index.d.ts for the options and answers.
 * @param {import('./client.js').Client} client
 * @param {string} domain
 * @param {object} [options]
 */
function middleware(client, domain, options = {}) {
  const o = { ...options };
  const v4Bits = o.ipv4Prefix === undefined ? 32 : o.ipv4Prefix;
  const v6Bits = o.ipv6Prefix === undefined ? 64 : o.ipv6Prefix;
  if (!Number.isInteger(v4Bits) || v4Bits < 1 || v4Bits > 32 || !Number.isInteger(v6Bits) || v6Bits < 1 || v6Bits > 128) {
    throw new RangeError(
      `ratelimitd: ipv4Prefix ${v4Bits}, ipv6Prefix ${v6Bits}: want an IPv4 length of 1 to 32 and an IPv6 length of 1 to 128`,
    );
  }
  const trusted = (o.trustedProxies || []).map(ip.parsePrefix);
  const proxyHeader = o.proxyHeader || 'X-Forwarded-For';
  let useIP = o.clientIP === undefined ? o.trustedProxies !== undefined : Boolean(o.clientIP);
  let route = o.route === undefined ? false : o.route;
  if (!o.apiKeyHeader && !useIP && !route && !o.descriptors) {
    useIP = true;
    route = true;
  }
  const routeFn = typeof route === 'function' ? route : requestPath;
  const logger = o.logger || null;

  async function descriptorsOf(req) {
    const ds = [];
    if (o.apiKeyHeader) {
      const v = header(req, o.apiKeyHeader);
      if (v !== '') ds.push({ entries: [{ key: 'api_key', value: headerBytes(v) }] });
    }
    if (useIP) {
      const a = clientAddr(req, proxyHeader, trusted);
      if (a) ds.push({ entries: [{ key: 'remote_address', value: ip.network(a, v4Bits, v6Bits) }] });
    }
    if (route) {
      ds.push({ entries: [{ key: 'path', value: routeFn(req) }, { key: 'method', value: req.method }] });
    }
    if (o.descriptors) ds.push(...((await o.descriptors(req)) || []));
    return ds;
  }

  const keyError = o.keyErrorHandler || badRequest;

  /** badRequest is the default key error handler: 400, logged at warn. */
  function badRequest(req, res, err) {
    if (logger) logger.warn(`ratelimitd: rate limit key function failed (${req.method} ${req.url}): ${err && err.stack ? err.stack : err}`);
    writeError(res, 400, 'rate limit: cannot attribute the request');
  }

  /** decide asks ratelimitd about req and answers it, or calls next. */
  async function decide(req, res, next) {
    let ds;
    try {
      // A throwing skip cannot attribute the request either.
      if (o.skip && (await o.skip(req))) {
        next();
        return;
      }
      ds = await descriptorsOf(req);
    } catch (err) {
      await keyError(req, res, err);
      return;
    }
    if (ds.length === 0) {
      next();
      return;
    }
    // The request ends for the middleware when its connection closes first.
    const ac = new AbortController();
    const onClose = () => ac.abort();
    res.once('close', onClose);
    let d;
    try {
      d = await client.shouldRateLimit(domain, ds, { signal: ac.signal });
    } catch (err) {
      if (err && err.code === 3) {
        if (logger) logger.error(`ratelimitd: rate limit request malformed (domain ${JSON.stringify(domain)}): ${err.message}`);
        writeError(res, 500, 'rate limit: malformed rate limit request');
        return;
      }
      writeError(res, 503, 'rate limit: request ended');
      return;
    } finally {
      res.removeListener('close', onClose);
    }
    if (d.error && !d.allowed) {
      writeError(res, 503, 'rate limit service unavailable');
      return;
    }
    // Another handler may have answered meanwhile: then no headers.
    if (!answered(res)) {
      for (const h of d.headers) {
        if (h.name.toLowerCase() === 'retry-after') continue; // ours
        // A value Node would refuse (a character over 0xFF) is dropped, not thrown.
        if (!sendable(h.name, h.value)) {
          if (logger) logger.warn(`ratelimitd: header ${JSON.stringify(h.name)} from ratelimitd dropped: Node cannot send its value`);
          continue;
        }
        addHeader(res, h.name, h.value);
      }
      if (o.xRateLimitHeaders) setXRateLimit(res, d.statuses);
    }
    if (d.allowed) {
      next();
      return;
    }
    writeRefusal(res, d);
  }

  return async function ratelimitd(req, res, next) {
    // Express 4 ignores the promise a middleware returns: an error left in
    // it would be an unhandled rejection, ending the process. It goes to
    // next(err) instead, as Express expects errors.
    let nexted = false;
    const once = (...args) => {
      nexted = true;
      next(...args);
    };
    try {
      await decide(req, res, once);
    } catch (err) {
      if (nexted) throw err; // the next handler's own error, not ours
      next(err);
    }
  };
}

module.exports = { middleware, clientIP, QUOTA_EXCEEDED };
