'use strict';
// IP addresses for the middleware: parsing (with or without port, zone or
// brackets), prefixes (CIDRs), and masking to a network, printed as Go's
// net/netip prints addresses (RFC 5952), so that the Node and Go
// middlewares count a client under the same value.

/**
 * An address: 4 bytes (IPv4) or 16 (IPv6), never IPv4-mapped IPv6.
 * @typedef {{ bytes: Uint8Array }} Addr
 */

/** parseV4 returns the 4 bytes of a dotted quad, or null. */
function parseV4(s) {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const b = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    // Go's netip refuses leading zeros (octal ambiguity), and so do we.
    if (!/^\d{1,3}$/.test(p) || (p.length > 1 && p[0] === '0')) return null;
    const n = Number(p);
    if (n > 255) return null;
    b[i] = n;
  }
  return b;
}

/** parseV6 returns the 16 bytes of an IPv6 address without zone, or null. */
function parseV6(s) {
  if (!s.includes(':')) return null;
  let tail = null;
  const lastColon = s.lastIndexOf(':');
  if (s.slice(lastColon + 1).includes('.')) {
    tail = parseV4(s.slice(lastColon + 1));
    if (!tail) return null;
    s = s.slice(0, lastColon + 1) + '0:0'; // two groups, replaced below
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const groups = (h) => (h === '' ? [] : h.split(':'));
  const head = groups(halves[0]);
  const rest = halves.length === 2 ? groups(halves[1]) : [];
  const total = head.length + rest.length;
  if (halves.length === 2 ? total > 7 : total !== 8) return null;
  const all = head.concat(new Array(8 - total).fill('0'), rest);
  const b = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(all[i])) return null;
    const n = parseInt(all[i], 16);
    b[2 * i] = n >> 8;
    b[2 * i + 1] = n & 0xff;
  }
  if (tail) b.set(tail, 12);
  return b;
}

/** unmap returns the IPv4 address an IPv4-mapped IPv6 address holds, else b. */
function unmap(b) {
  if (b.length !== 16) return b;
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return b;
  if (b[10] !== 0xff || b[11] !== 0xff) return b;
  return b.slice(12);
}

/**
 * parseAddr parses an IPv4 or IPv6 address (a zone is dropped); IPv4-mapped
 * IPv6 addresses come back as IPv4. It returns null for anything else.
 * @param {string} s
 * @returns {Uint8Array | null}
 */
function parseAddr(s) {
  const pct = s.indexOf('%');
  if (pct >= 0) {
    if (pct === s.length - 1 || !s.slice(0, pct).includes(':')) return null;
    s = s.slice(0, pct);
  }
  const b = s.includes(':') ? parseV6(s) : parseV4(s);
  return b && unmap(b);
}

/**
 * parseNode parses an address with an optional port, IPv6 optionally in
 * brackets: "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]",
 * "[2001:db8::1]:80". It returns null for anything else (as Go's
 * middleware does: "unknown", obfuscated identifiers, garbage).
 * @param {string} s
 * @returns {Uint8Array | null}
 */
function parseNode(s) {
  s = s.trim();
  if (s === '') return null;
  const a = parseAddr(s);
  if (a) return a;
  let m = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(s);
  if (m) {
    if (m[2] !== undefined && Number(m[2]) > 65535) return null;
    if (!m[1].includes(':')) return null; // only IPv6 goes in brackets
    return parseAddr(m[1]);
  }
  m = /^([0-9.]+):(\d{1,5})$/.exec(s);
  if (m && Number(m[2]) <= 65535) return parseAddr(m[1]);
  return null;
}

/**
 * parsePrefix parses a CIDR ("10.0.0.0/8", "2001:db8::/32") or a single
 * address (its full-length prefix); an IPv4-mapped one of /96 or longer
 * ("::ffff:10.0.0.5", "::ffff:10.0.0.0/104") as its IPv4 prefix. It
 * throws on anything else.
 * @param {string} s
 * @returns {{ bytes: Uint8Array, bits: number }}
 */
function parsePrefix(s) {
  const slash = s.indexOf('/');
  const addr = slash < 0 ? s : s.slice(0, slash);
  const bytes = addr.includes(':') ? parseV6(addr) : parseV4(addr);
  if (!bytes) throw new TypeError(`ratelimitd: trusted proxy ${JSON.stringify(s)} is not an address or CIDR prefix`);
  let bits = bytes.length * 8;
  if (slash >= 0) {
    const b = s.slice(slash + 1);
    if (!/^\d{1,3}$/.test(b) || Number(b) > bytes.length * 8) {
      throw new TypeError(`ratelimitd: trusted proxy ${JSON.stringify(s)} has a bad prefix length`);
    }
    bits = Number(b);
  }
  // Peers are compared unmapped (see parseAddr), so an IPv4-mapped prefix
  // (::ffff:10.0.0.5, as Node shows peers on dual-stack sockets, or
  // ::ffff:10.0.0.0/104) is its IPv4 prefix; one wider than /96 holds
  // more than IPv4-mapped addresses and stays IPv6.
  const v4 = unmap(bytes);
  if (v4.length === 4 && bytes.length === 16 && bits >= 96) return { bytes: maskBytes(v4, bits - 96), bits: bits - 96 };
  return { bytes: maskBytes(bytes, bits), bits };
}

/** maskBytes returns a copy of b with all but its first bits bits zeroed. */
function maskBytes(b, bits) {
  const out = new Uint8Array(b.length);
  for (let i = 0; i < b.length; i++) {
    const keep = Math.max(0, Math.min(8, bits - 8 * i));
    out[i] = b[i] & ((0xff00 >> keep) & 0xff);
  }
  return out;
}

/**
 * contains reports whether the prefix p holds the address a (of the same
 * family).
 */
function contains(p, a) {
  if (p.bytes.length !== a.length) return false;
  const m = maskBytes(a, p.bits);
  for (let i = 0; i < m.length; i++) if (m[i] !== p.bytes[i]) return false;
  return true;
}

/**
 * format prints an address as Go's netip does: dotted quad, or RFC 5952
 * (lower-case hex, the longest run of two or more zero groups, the first
 * one on a tie, as ::).
 * @param {Uint8Array} b
 */
function format(b) {
  if (b.length === 4) return Array.from(b).join('.');
  const g = [];
  for (let i = 0; i < 8; i++) g.push((b[2 * i] << 8) | b[2 * i + 1]);
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best < 0) return g.map((x) => x.toString(16)).join(':');
  const head = g.slice(0, best).map((x) => x.toString(16)).join(':');
  const tail = g.slice(best + bestLen).map((x) => x.toString(16)).join(':');
  return `${head}::${tail}`;
}

/**
 * network returns the network of a that the middleware counts, printed:
 * a itself for IPv4 at 32 bits, its /64 for IPv6 at 64 bits.
 */
function network(a, v4Bits, v6Bits) {
  return format(maskBytes(a, a.length === 4 ? v4Bits : v6Bits));
}

module.exports = { parseAddr, parseNode, parsePrefix, contains, format, network };
