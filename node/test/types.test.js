'use strict';
// index.d.ts and the generated declarations type-check a TypeScript
// program using the package (test/types/use.ts), with the typescript of
// the devDependencies.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

test('TypeScript users get the types of the package and of the stubs', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const project = path.join(__dirname, 'types', 'tsconfig.json');
  try {
    execFileSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc -p ${project}:\n${err.stdout}${err.stderr}`);
  }
});
