#!/usr/bin/env node
// Copies the generated stubs (gen/node in the repository, which
// .ci/generate-node writes) into this package's gen/, with the
// repository's LICENSE, so that the package holds them when installed
// from the repository's node/ directory or packed by npm pack (which
// skips symlinks). It runs as the prepare script: on npm install and npm
// ci in node/, on installs of the directory, and before npm pack. Outside
// the repository (an installed tarball) there is nothing to copy, and the
// package already holds its gen/.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const src = path.join(pkg, '..', 'gen', 'node');
const dst = path.join(pkg, 'gen');

/** copyStubs copies the stubs and LICENSE, when in the repository. */
function copyStubs() {
  if (!fs.existsSync(path.join(src, 'ratelimit'))) {
    if (!fs.existsSync(dst)) {
      console.warn(`ratelimitd: no stubs at ${src} (run .ci/generate-node) nor in ${dst}`);
    }
    return;
  }
  fs.rmSync(dst, { recursive: true, force: true });
  fs.cpSync(src, dst, { recursive: true });
  const license = path.join(pkg, '..', 'LICENSE');
  if (fs.existsSync(license)) fs.copyFileSync(license, path.join(pkg, 'LICENSE'));
}

copyStubs();
