'use strict';
// The package as users get it: npm pack from a copy of the repository's
// node/ (no gen/ nor LICENSE of its own, as in a fresh clone; prepack
// copies them in), installed from the tarball into a fresh project with
// @grpc/grpc-js at the bottom of the peer range, from npm's cache or the
// registry (no install script of the package runs, none is needed). The
// project's CommonJS and ES module consumers load it and, with
// RATELIMITD_BIN, pass live checks (Client, Quota, middleware) against a
// real ratelimitd; tsc --strict checks TypeScript consumers of both kinds.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { BIN, startDaemon } = require('./daemon.js');

const pkg = path.join(__dirname, '..');
const repo = path.join(pkg, '..');
// The lowest @grpc/grpc-js of the peer range: the consumers run on it.
const PEER_GRPC = require('../package.json').peerDependencies['@grpc/grpc-js'].replace(/^\^/, '');

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

/** run runs a command, resolving to its stdout, rejecting with its output on failure. */
function run(cmd, args, opts) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 24, ...opts }, (err, stdout, stderr) => {
      if (err) reject(Object.assign(err, { message: `${cmd} ${args.join(' ')}: ${err.message}\n${stdout}${stderr}` }));
      else resolve(stdout);
    });
  });
}

const rules = `
domain: q
descriptors:
  - key: user
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 2}
  - key: open
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`;

test('npm pack makes a tarball that installs into a fresh project and works from require, import and TypeScript', async (t) => {
  const tmp = cloneLike(t);
  const dir = path.join(tmp, 'node');
  assert.ok(!fs.existsSync(path.join(dir, 'gen')), 'the copy starts without stubs');
  const out = await run('npm', ['pack', '--json', '--offline', '--pack-destination', tmp], { cwd: dir });
  // npm may print the scripts' output before the JSON.
  const info = JSON.parse(out.slice(out.indexOf('[')))[0];
  const files = new Set(info.files.map((f) => f.path));
  for (const f of [
    'package.json',
    'README.md',
    'LICENSE',
    'index.d.ts',
    'index.d.mts',
    'index.mjs',
    'lib/index.js',
    'lib/quota.js',
    'lib/fake.js',
    'lib/errors.js',
    'gen/ratelimit/v1/ratelimit.js',
    'gen/envoy/service/ratelimit/v3/rls.d.ts',
    'gen/envoy/service/rate_limit_quota/v3/rlqs.js',
    'gen/envoy/service/rate_limit_quota/v3/rlqs.d.ts',
  ]) {
    assert.ok(files.has(f), `${f} is not in the package: ${[...files].join(' ')}`);
  }
  assert.ok(![...files].some((f) => /^(test|bench|scripts|node_modules)\//.test(f)), 'no tests, benchmarks, scripts or modules');
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  assert.equal(manifest.scripts.prepare, undefined, 'nothing runs at install time');
  assert.equal(manifest.scripts.install, undefined);

  // A fresh project: the tarball, and the peer dependency at the bottom of its range.
  const app = path.join(tmp, 'app');
  fs.cpSync(path.join(__dirname, 'consumer'), app, { recursive: true });
  fs.writeFileSync(
    path.join(app, 'package.json'),
    JSON.stringify({ private: true, dependencies: { ratelimitd: `file:${path.join(tmp, info.filename)}`, '@grpc/grpc-js': PEER_GRPC } }),
  );
  try {
    await run('npm', ['install', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: app });
  } catch (err) {
    if (process.env.CI !== 'true' && !(await run('npm', ['ping'], { timeout: 20000 }).then(() => true, () => false))) {
      t.skip(`npm install needs the registry for @grpc/grpc-js ${PEER_GRPC}, which did not answer`);
      return;
    }
    throw err;
  }

  // tsc --strict, on ESM and CommonJS consumers, against the installed types.
  const tsc = require.resolve('typescript/bin/tsc');
  await run(process.execPath, [
    tsc, '--strict', '--noEmit', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022',
    '--types', 'node', '--typeRoots', path.join(pkg, 'node_modules', '@types'), 'consumer.mts', 'consumer.cts',
  ], { cwd: app });

  const env = { ...process.env, NODE_PATH: '' };
  let want = { exports: [], badOptions: true };
  if (BIN) {
    const config = path.join(tmp, 'rules.yaml');
    fs.writeFileSync(config, rules);
    env.RATELIMITD_ADDR = await startDaemon(t, config);
    want = { ...want, client: [true, true, false], quota: [true, false], middleware: [204, 429] };
  } else {
    t.diagnostic('RATELIMITD_BIN is not set: the consumers run without the live checks');
  }
  for (const [file, tag] of [['consumer.cjs', 'cjs'], ['consumer.mjs', 'esm']]) {
    const got = JSON.parse(await run(process.execPath, [file], { cwd: app, env }));
    assert.deepEqual(got, { tag, ...want }, file);
  }
});
