'use strict';
// Test helpers starting real processes: ratelimitd (RATELIMITD_BIN) and
// redis-server, each on free loopback ports, killed after the test.

const { spawn } = require('node:child_process');
const net = require('node:net');
const readline = require('node:readline');

const BIN = process.env.RATELIMITD_BIN;

/**
 * startDaemon starts ratelimitd with config (and args) on free loopback
 * ports and resolves to its gRPC address, once its log says it started.
 * The daemon is killed after the test t.
 */
function startDaemon(t, config, ...args) {
  const all = ['--config', config, '--grpc-addr', '127.0.0.1:0', '--http-addr', '127.0.0.1:0', '--log-format', 'json', ...args];
  const proc = spawn(BIN, all, { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => proc.kill());
  const log = [];
  return new Promise((resolve, reject) => {
    const onLine = (line) => {
      log.push(line);
      let rec;
      try {
        rec = JSON.parse(line);
      } catch {
        return;
      }
      if (rec.msg === 'ratelimitd started' && rec.grpc) resolve(rec.grpc);
    };
    readline.createInterface({ input: proc.stdout }).on('line', onLine);
    readline.createInterface({ input: proc.stderr }).on('line', onLine);
    proc.on('error', reject);
    proc.on('exit', (code) => reject(new Error(`ratelimitd exited (${code}) before starting:\n${log.join('\n')}`)));
  });
}

/** freePort returns a loopback port nothing listens on. */
async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * startRedis starts redis-server, without persistence, on a free
 * loopback port, and resolves to its address once it accepts
 * connections; it is killed after the test t. It rejects when
 * redis-server cannot be started (not installed).
 */
async function startRedis(t) {
  const port = await freePort();
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.after(() => proc.kill());
  const log = [];
  await new Promise((resolve, reject) => {
    const onLine = (line) => {
      log.push(line);
      if (/Ready to accept connections/.test(line)) resolve();
    };
    readline.createInterface({ input: proc.stdout }).on('line', onLine);
    readline.createInterface({ input: proc.stderr }).on('line', onLine);
    proc.on('error', reject);
    proc.on('exit', (code) => reject(new Error(`redis-server exited (${code}) before starting:\n${log.join('\n')}`)));
  });
  return `127.0.0.1:${port}`;
}

module.exports = { BIN, startDaemon, startRedis, freePort };
