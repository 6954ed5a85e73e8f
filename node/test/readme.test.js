'use strict';
// README.md's snippets are CommonJS, as the package is: they compile as a
// CommonJS module body (no top-level await), and its links stay inside the
// repository.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');

const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');

test("README's js snippets compile as CommonJS", () => {
  const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.ok(blocks.length >= 2, 'snippets found');
  for (const code of blocks) {
    // A CommonJS module body is a function's: await outside an async function is a SyntaxError.
    assert.doesNotThrow(() => new vm.Script(`(function (exports, require, module, __filename, __dirname) {${code}\n})`), code);
  }
});

test("README links to the repository's README, not a web address of it", () => {
  assert.match(readme, /\]\(\.\.\/README\.md\)/);
  assert.doesNotMatch(readme, /github\.com\/ratelimitd\/ratelimitd/);
});
