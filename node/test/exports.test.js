'use strict';
// The ES module entry point (index.mjs) names lib/index.js's exports one by
// one: this holds the two lists to each other, so that an export added to
// one cannot be missing from the other, and both give the same objects.

const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

test('index.mjs exports what lib/index.js exports, the same objects', async () => {
  const cjs = require('../lib/index.js');
  const esm = await import(pathToFileURL(path.join(__dirname, '..', 'index.mjs')).href);
  const named = Object.keys(esm).filter((k) => k !== 'default').sort();
  assert.deepStrictEqual(named, Object.keys(cjs).sort());
  for (const k of named) assert.strictEqual(esm[k], cjs[k], k);
  assert.strictEqual(esm.default, cjs);
});
