'use strict';
// npm pack puts the stubs in the package: they are copies (prepare), not
// the symlink npm pack would skip.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

test('npm pack includes the stubs, the code, the types, README and LICENSE', (t) => {
  let out;
  try {
    out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: path.join(__dirname, '..'),
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (err) {
    if (err.code === 'ENOENT') {
      t.skip('npm is not on PATH');
      return;
    }
    throw err;
  }
  const files = new Set(JSON.parse(out)[0].files.map((f) => f.path));
  for (const f of [
    'package.json',
    'README.md',
    'LICENSE',
    'index.d.ts',
    'lib/index.js',
    'lib/client.js',
    'lib/middleware.js',
    'gen/ratelimit/v1/ratelimit.js',
    'gen/ratelimit/v1/ratelimit.d.ts',
    'gen/envoy/service/ratelimit/v3/rls.js',
    'gen/envoy/service/ratelimit/v3/rls.d.ts',
    'gen/google/protobuf/duration.js',
  ]) {
    assert.ok(files.has(f), `${f} is not in the package: ${[...files].join(' ')}`);
  }
  assert.ok(![...files].some((f) => f.startsWith('test/') || f.startsWith('node_modules/')), 'no tests or modules');
});
