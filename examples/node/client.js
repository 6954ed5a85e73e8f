#!/usr/bin/env node
// Asks ratelimitd whether a client may log in: examples/config.yaml (make
// run) allows 5 logins a minute per client IP, so the 6th is refused, and
// the 7th is refused by the client itself, which remembers the refusal for
// up to 1 s without asking ratelimitd again.
//
//   npm install && node client.js [ADDR]    (ADDR: 127.0.0.1:8081 by default)
'use strict';

const { Client, D } = require('ratelimitd');

async function main() {
  // Connects now; a call waits up to 1 s for the connection, then has
  // 50 ms; it fails open.
  const client = new Client(process.argv[2] || process.env.RATELIMITD_ADDR || '127.0.0.1:8081');
  try {
    for (let i = 1; i <= 7; i++) {
      const d = await client.shouldRateLimit('edge', [D('path', '/login', 'remote_address', '192.0.2.1')]);
      // ratelimitd could not be asked (down, or too slow): the failure
      // policy decided, and there are no statuses.
      if (d.error) console.log(`login ${i}: ratelimitd failed (${d.error.message}): allowed anyway (fail open)`);
      else if (d.allowed) console.log(`login ${i}: allowed, ${d.statuses[0].remaining} left`);
      else console.log(`login ${i}: refused${d.local ? ' locally' : ''}, retry in ${Math.ceil(d.retryAfterMs / 1000)} s`);
    }
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
