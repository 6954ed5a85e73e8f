'use strict';
// npm pack, with its scripts, from a copy of the repository's node/ (no
// gen/ nor LICENSE of its own, as in a fresh clone): prepare must copy the
// stubs and LICENSE in, and the tarball must load.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const repo = path.join(pkg, '..');

/** cloneLike copies what a fresh clone holds of node/, gen/node and LICENSE into a temporary directory. */
function cloneLike(t) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimitd-pack-'));
  t.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const skip = new Set(['node_modules', 'gen', 'LICENSE']);
  fs.cpSync(pkg, path.join(tmp, 'node'), {
    recursive: true,
    filter: (src) => {
      const rel = path.relative(pkg, src);
      return rel === '' || !(skip.has(rel.split(path.sep)[0]) || rel.startsWith('.gen-') || rel.endsWith('.tgz'));
    },
  });
  fs.cpSync(path.join(repo, 'gen', 'node'), path.join(tmp, 'gen', 'node'), { recursive: true });
  fs.copyFileSync(path.join(repo, 'LICENSE'), path.join(tmp, 'LICENSE'));
  return tmp;
}

test('npm pack runs prepare: the stubs, the code, the types, README and LICENSE are in the tarball, which loads', (t) => {
  const tmp = cloneLike(t);
  const dir = path.join(tmp, 'node');
  assert.ok(!fs.existsSync(path.join(dir, 'gen')), 'the copy starts without stubs');
  let out;
  try {
    out = execFileSync('npm', ['pack', '--json', '--offline', '--pack-destination', tmp], {
      cwd: dir,
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
  // npm may print the scripts' output before the JSON.
  const info = JSON.parse(out.slice(out.indexOf('[')))[0];
  const files = new Set(info.files.map((f) => f.path));
  for (const f of [
    'package.json',
    'README.md',
    'LICENSE',
    'index.d.ts',
    'lib/index.js',
    'lib/client.js',
    'lib/middleware.js',
    'lib/util.js',
    'gen/ratelimit/v1/ratelimit.js',
    'gen/ratelimit/v1/ratelimit.d.ts',
    'gen/envoy/service/ratelimit/v3/rls.js',
    'gen/envoy/service/ratelimit/v3/rls.d.ts',
    'gen/google/protobuf/duration.js',
  ]) {
    assert.ok(files.has(f), `${f} is not in the package: ${[...files].join(' ')}`);
  }
  assert.ok(![...files].some((f) => f.startsWith('test/') || f.startsWith('node_modules/')), 'no tests or modules');

  // The tarball, unpacked, loads with the package's dependencies.
  const unpacked = path.join(tmp, 'unpacked');
  fs.mkdirSync(unpacked);
  execFileSync('tar', ['-xzf', path.join(tmp, info.filename), '-C', unpacked]);
  const got = execFileSync(
    process.execPath,
    ['-e', 'const r = require(process.argv[1]); console.log(typeof r.Client, typeof r.middleware, typeof r.ratelimitV1.ShouldRateLimitRequest.encode)', path.join(unpacked, 'package')],
    { encoding: 'utf8', env: { ...process.env, NODE_PATH: path.join(pkg, 'node_modules') } },
  );
  assert.equal(got.trim(), 'function function function');
});
