// Types of the ES module entry point (index.mjs): the same names as the
// CommonJS entry point's (index.d.ts), which index.mjs re-exports.
export * from './index.js';
import * as ratelimitd from './index.js';
export default ratelimitd;
