#!/usr/bin/env node
// The prepare script (npm install or npm ci in node/, an install of the
// directory, npm pack): copies the stubs into the package
// (copy-stubs.js), then makes sure the runtime dependencies resolve from
// here. When another project installs this directory by symlink (npm's
// default for a directory), npm installs none of the package's
// dependencies; the package's code, which runs from this directory, would
// not find them. Then it installs them here, at the versions of
// package-lock.json (npm ci --omit=dev).
'use strict';

const { execFileSync } = require('node:child_process');
const path = require('node:path');

require('./copy-stubs.js');

const pkg = path.join(__dirname, '..');
const deps = Object.keys(require(path.join(pkg, 'package.json')).dependencies);
const missing = deps.filter((d) => {
  try {
    require.resolve(d, { paths: [pkg] });
    return false;
  } catch {
    return true;
  }
});
// npm pack and publish need only the files, not the dependencies.
const packing = ['pack', 'publish'].includes(process.env.npm_command);
if (missing.length > 0 && !packing) {
  console.warn(`ratelimitd: installing the runtime dependencies in ${pkg} (missing: ${missing.join(', ')})`);
  const npm = process.env.npm_execpath
    ? [process.execPath, [process.env.npm_execpath]]
    : [process.platform === 'win32' ? 'npm.cmd' : 'npm', []];
  execFileSync(npm[0], [...npm[1], 'ci', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: pkg, stdio: 'inherit' });
}
