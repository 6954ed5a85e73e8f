#!/usr/bin/env node
// compile-stubs.js SRC OUT compiles the TypeScript stubs that ts-proto
// wrote in SRC to CommonJS JavaScript and declarations in OUT, for
// .ci/generate-node. ts-proto's header (its version and protoc's) gains
// the typescript version, and is copied to the top of each .d.ts, which
// tsc would leave without it.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const ts = require('typescript');

const [src, out] = process.argv.slice(2).map((p) => path.resolve(p));
if (!src || !out) {
  console.error('usage: compile-stubs.js SRC OUT');
  process.exit(2);
}

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]))
    .filter((f) => f.endsWith('.ts'))
    .sort();
}

const headerEnd = /^\/\/ source: .*\n/m;
const headers = new Map();
const files = walk(src);
for (const f of files) {
  let text = fs.readFileSync(f, 'utf8');
  const m = headerEnd.exec(text);
  if (!m) throw new Error(`${f}: no ts-proto header`);
  text = text.replace(/^(\/\/   protoc .*\n)/m, `$1//   typescript           v${ts.version}\n`);
  fs.writeFileSync(f, text);
  headers.set(path.relative(src, f).replace(/\.ts$/, ''), text.slice(0, headerEnd.exec(text).index + headerEnd.exec(text)[0].length));
}

const options = {
  target: ts.ScriptTarget.ES2020, // Node 18 and later
  module: ts.ModuleKind.Node16, // CommonJS here: no "type": "module"
  moduleResolution: ts.ModuleResolutionKind.Node16,
  declaration: true,
  strict: true,
  esModuleInterop: true,
  skipLibCheck: true,
  types: ['node'],
  typeRoots: [path.join(__dirname, '..', 'node_modules', '@types')],
  newLine: ts.NewLineKind.LineFeed,
  rootDir: src,
  outDir: out,
};
const program = ts.createProgram(files, options);
const result = program.emit();
const diags = ts.getPreEmitDiagnostics(program).concat(result.diagnostics);
if (diags.length > 0) {
  const host = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => process.cwd(), getNewLine: () => '\n' };
  console.error(ts.formatDiagnostics(diags, host));
  process.exit(1);
}
for (const [rel, header] of headers) {
  const dts = path.join(out, `${rel}.d.ts`);
  fs.writeFileSync(dts, header + fs.readFileSync(dts, 'utf8'));
}
