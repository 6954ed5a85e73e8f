// An ES module consumer of the installed tarball (pack.test.js): the same
// checks as consumer.cjs, through import, and one instance of each class
// whether imported or required.
import { createRequire } from 'node:module';
import * as ratelimitd from 'ratelimitd';
import whole from 'ratelimitd';
import { Client, Quota } from 'ratelimitd';
import grpc from '@grpc/grpc-js';

const require = createRequire(import.meta.url);
const { checks } = require('./consumer-checks.js');
const cjs = require('ratelimitd');
if (Client !== cjs.Client || Quota !== cjs.Quota || whole.RateLimitError !== cjs.RateLimitError) {
  throw new Error('import and require gave two instances of the package');
}
console.log(JSON.stringify(await checks(ratelimitd, grpc, 'esm')));
