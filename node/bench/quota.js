#!/usr/bin/env node
// Measures a Quota's local decision: allow() on one descriptor of two
// entries (tenant, path) whose bucket holds a token bucket assignment
// large enough never to refuse, as the Go client's BenchmarkQuotaAllow
// does; and counts the RPCs and stream messages ratelimitd's side (here
// an RLQS server in this process, on loopback) received meanwhile.
//
//   node bench/quota.js [decisions per run, default 2000000] [runs, default 5]
//
// It prints ns per decision of each run and their median. No assertion
// on time: the figure depends on the machine.
'use strict';

const grpc = require('@grpc/grpc-js');
const { BinaryReader, BinaryWriter } = require('@bufbuild/protobuf/wire');
const { Quota, D, rlqsV3 } = require('..');
const { internal } = require('../lib/quota.js');

const N = Number(process.argv[2] || 2e6);
const RUNS = Number(process.argv[3] || 5);

async function main() {
  let streams = 0;
  let messages = 0;
  const server = new grpc.Server();
  server.register(
    internal.METHOD,
    (call) => {
      streams++;
      call.on('error', () => {});
      call.on('data', (r) => {
        messages++;
        call.write({
          bucketAction: r.bucketQuotaUsages.map((u) => ({
            bucketId: u.bucketId,
            quotaAssignmentAction: {
              assignmentTimeToLive: { seconds: 3600, nanos: 0 },
              rateLimitStrategy: { tokenBucket: { maxTokens: 2 ** 31, tokensPerFill: 2 ** 31, fillInterval: { seconds: 0, nanos: 1e6 } } },
            },
          })),
        });
      });
    },
    (msg) => Buffer.from(rlqsV3.RateLimitQuotaResponse.encode(msg, new BinaryWriter(internal.utf8Codec.encode)).finish()),
    (buf) => rlqsV3.RateLimitQuotaUsageReports.decode(new BinaryReader(buf, internal.utf8Codec.decode)),
    'bidi',
  );
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const q = new Quota(`127.0.0.1:${port}`, { domain: 'edge', reportingIntervalMs: 3600000 });
  const ds = [D('tenant', 'acme', 'path', '/search')];
  q.allow(ds);
  for (const deadline = Date.now() + 10000; (await q.shouldRateLimit('edge', ds)).error !== null; ) {
    if (Date.now() > deadline) throw new Error('no assignment in 10 s');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  for (let i = 0; i < 1e5; i++) q.allow(ds); // warm up the JIT
  const before = { streams, messages };
  const results = [];
  for (let r = 0; r < RUNS; r++) {
    let allowed = 0;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) if (q.allow(ds)) allowed++;
    const ns = Number(process.hrtime.bigint() - t0) / N;
    if (allowed !== N) throw new Error(`${N - allowed} decisions refused`);
    results.push(ns);
    console.log(`run ${r + 1}: ${ns.toFixed(1)} ns/decision`);
  }
  await new Promise((resolve) => setImmediate(resolve)); // let anything queued reach the server
  const rpcs = streams - before.streams;
  const msgs = messages - before.messages;
  results.sort((a, b) => a - b);
  console.log(
    `Quota.allow, 1 descriptor of 2 entries, ${RUNS} runs of ${N}: median ${results[RUNS >> 1].toFixed(1)} ns/decision ` +
      `(${results[0].toFixed(1)}-${results[RUNS - 1].toFixed(1)}); ${rpcs} RPCs and ${msgs} stream messages during the runs; ` +
      `node ${process.version}`,
  );
  q.close();
  server.forceShutdown();
  if (rpcs !== 0 || msgs !== 0) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
