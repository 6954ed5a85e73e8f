// A CommonJS consumer of the installed tarball (pack.test.js): the
// package's exports, and with RATELIMITD_ADDR the live checks of
// consumer-checks.js. It prints the results as JSON.
'use strict';
const ratelimitd = require('ratelimitd');
const grpc = require('@grpc/grpc-js');
const { checks } = require('./consumer-checks.js');

checks(ratelimitd, grpc, 'cjs').then(
  (r) => console.log(JSON.stringify(r)),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
