#!/usr/bin/env node
// Asks a live ratelimitd, from Node, through both of its gRPC APIs.
//
// It calls ratelimit.v1.RateLimitService/ShouldRateLimit (the native API)
// and envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (Envoy's)
// three times each for a fresh user of the domain "polyglot"
// (../python/rules.yaml: 2 a minute), and checks the answers: OK, OK, then
// OVER_LIMIT. It exits 1 on any mismatch.
//
// The services are loaded by @grpc/proto-loader from a FileDescriptorSet
// written by `go run ./internal/cmd/rlsdescriptors -o FILE` (Envoy's Go
// module ships no .proto files):
//
//   npm ci && node client.js --descriptors rls.binpb 127.0.0.1:8081
//
// The address may also come from RATELIMITD_ADDR, the set from
// RLS_DESCRIPTORS.
'use strict';

const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const DOMAIN = 'polyglot';
const LIMIT = 2;

function parseArgs(argv) {
  let addr = process.env.RATELIMITD_ADDR || '127.0.0.1:8081';
  let descriptors = process.env.RLS_DESCRIPTORS;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--descriptors') descriptors = argv[++i];
    else if (argv[i].startsWith('--descriptors=')) descriptors = argv[i].slice('--descriptors='.length);
    else if (argv[i].startsWith('-')) usage(`unknown flag ${argv[i]}`);
    else addr = argv[i];
  }
  if (!descriptors) usage('no descriptor set: give --descriptors or RLS_DESCRIPTORS');
  return { addr, descriptors };
}

function usage(msg) {
  console.error(`client.js: ${msg}\nusage: node client.js --descriptors FILE [ADDR]`);
  process.exit(2);
}

let failures = 0;
function check(what, got, want) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) {
    console.error(`FAIL ${what}: got ${g}, want ${w}`);
    failures++;
  } else {
    console.log(`ok   ${what}: ${g}`);
  }
}

function call(client, req) {
  return new Promise((resolve, reject) => {
    client.ShouldRateLimit(req, { deadline: Date.now() + 5000 }, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

function durationMs(d) {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

async function native(Service, addr, user) {
  const client = new Service(addr, grpc.credentials.createInsecure());
  try {
    const req = { domain: DOMAIN, descriptors: [{ entries: [{ key: 'user', value: user }] }] };
    for (let i = 0; i <= LIMIT; i++) {
      const resp = await call(client, req);
      const what = `native call ${i + 1}`;
      const st = resp.statuses[0] || {};
      if (i < LIMIT) {
        check(`${what} code`, resp.code, 'CODE_OK');
        check(`${what} remaining`, st.remaining, LIMIT - 1 - i);
      } else {
        check(`${what} code`, resp.code, 'CODE_OVER_LIMIT');
        check(`${what} status code`, st.code, 'CODE_OVER_LIMIT');
        check(`${what} limit`, st.limit && [st.limit.requests, durationMs(st.limit.window)], [LIMIT, 60000]);
        check(`${what} retry_after > 0`, durationMs(st.retry_after) > 0, true);
        check(`${what} Retry-After header`, resp.headers.some((h) => h.name.toLowerCase() === 'retry-after'), true);
      }
    }
  } finally {
    client.close();
  }
}

async function envoy(Service, addr, user) {
  const client = new Service(addr, grpc.credentials.createInsecure());
  try {
    const req = { domain: DOMAIN, descriptors: [{ entries: [{ key: 'user', value: user }] }] };
    for (let i = 0; i <= LIMIT; i++) {
      const resp = await call(client, req);
      const what = `envoy call ${i + 1}`;
      const want = i < LIMIT ? 'OK' : 'OVER_LIMIT';
      const st = resp.statuses[0] || {};
      check(`${what} overall_code`, resp.overall_code, want);
      check(`${what} status code`, st.code, want);
      check(`${what} current_limit`, st.current_limit && [st.current_limit.requests_per_unit, st.current_limit.unit], [LIMIT, 'MINUTE']);
      if (i < LIMIT) check(`${what} limit_remaining`, st.limit_remaining, LIMIT - 1 - i);
    }
  } finally {
    client.close();
  }
}

async function main() {
  const { addr, descriptors } = parseArgs(process.argv.slice(2));
  const def = protoLoader.loadFileDescriptorSetFromBuffer(fs.readFileSync(descriptors), {
    keepCase: true, // field names as in the .proto files
    longs: Number, // uint64 remaining and hits fit easily
    enums: String,
    defaults: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const run = `${process.pid}-${Date.now()}`;
  await native(pkg.ratelimit.v1.RateLimitService, addr, `node-native-${run}`);
  await envoy(pkg.envoy.service.ratelimit.v3.RateLimitService, addr, `node-envoy-${run}`);
  if (failures > 0) {
    console.error(`node: ${failures} check(s) failed`);
    process.exit(1);
  }
  const version = require('@grpc/grpc-js/package.json').version;
  console.log(`node: both APIs answered as expected (@grpc/grpc-js ${version})`);
}

main().catch((err) => {
  console.error('node:', err.message || err);
  process.exit(1);
});
