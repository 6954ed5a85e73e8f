'use strict';
// Small pieces the Client, its memory of refusals and the middleware share.

// A longer value is sent, and counted, as its SHA-256 digest.
const MAX_VALUE = 1024;

/** utf8 decodes valid UTF-8 only: decode throws on anything else. */
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** seconds returns ms in whole seconds, rounded up; 0 when not positive. */
function seconds(ms) {
  return ms > 0 ? Math.ceil(ms / 1000) : 0;
}

module.exports = { MAX_VALUE, utf8, seconds };
