// Types of the ratelimitd package: a client of ratelimitd's native API
// (ratelimit.v1), a quota mode deciding locally over Envoy's Rate Limit
// Quota Service, an Express-style HTTP middleware, a fake for tests, and
// the generated gRPC stubs of its APIs (see gen/). The same for require
// and import (index.d.mts re-exports these).

import type { ChannelCredentials, ChannelOptions, Client as GrpcClient, ServiceError } from '@grpc/grpc-js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import * as ratelimitV1 from './gen/ratelimit/v1/ratelimit';
import * as envoyRatelimitV3 from './gen/envoy/service/ratelimit/v3/rls';
import * as rlqsV3 from './gen/envoy/service/rate_limit_quota/v3/rlqs';
import * as duration from './gen/google/protobuf/duration';
import * as grpc from '@grpc/grpc-js';

/**
 * @grpc/grpc-js, a peer dependency: the application's own instance, which
 * the stubs use.
 * @deprecated Import @grpc/grpc-js itself: it is the same instance.
 */
export { grpc };

/** The generated stubs of ratelimitd's native API, ratelimit.v1. */
export { ratelimitV1 };
/** The generated stubs of Envoy's rate limit service, envoy.service.ratelimit.v3. */
export { envoyRatelimitV3 };
/** The generated stubs of Envoy's Rate Limit Quota Service, envoy.service.rate_limit_quota.v3 (the quota mode's). */
export { rlqsV3 };
/** google.protobuf.Duration, which the APIs use. */
export { duration };

/**
 * The error of a malformed request (code 3, INVALID_ARGUMENT), found
 * before any RPC, and the base of the package's errors. code is a gRPC
 * status code; details the message without the "ratelimitd: " prefix.
 */
export declare class RateLimitError extends Error {
  constructor(details: string, code: number, options?: { cause?: unknown });
  readonly code: number;
  readonly details: string;
}

/**
 * withSlot's rejection when the slot was refused (by ratelimitd, or by the
 * failure policy failing closed); decision is the acquire's. Code 8
 * (RESOURCE_EXHAUSTED).
 */
export declare class SlotRefusedError extends RateLimitError {
  constructor(decision: Decision);
  readonly decision: Decision;
}

/**
 * Lease.renew's rejection once the lease has expired or was released: its
 * slots may be held by others now; stop the work, or acquire again. Code 9
 * (FAILED_PRECONDITION).
 */
export declare class LeaseLostError extends RateLimitError {
  constructor();
}

/**
 * Decision.error when a Quota's failure policy decided: a bucket had no
 * assignment of ratelimitd in force (none received yet, or expired
 * because ratelimitd could not be reached), or the Quota held maxBuckets
 * buckets. Code 14 (UNAVAILABLE).
 */
export declare class NoAssignmentError extends RateLimitError {
  constructor();
}

/** How often, by default, a Quota reports its buckets' use: 5000 ms. */
export declare const DEFAULT_REPORTING_INTERVAL_MS: number;
/** How many buckets a Quota holds at most by default: 10000. */
export declare const DEFAULT_QUOTA_MAX_BUCKETS: number;
/** How many reporting intervals a bucket may go unused before a Quota forgets it: 3. */
export declare const QUOTA_IDLE_INTERVALS: number;

/** The default budget of one shouldRateLimit call: 50 ms. */
export declare const DEFAULT_TIMEOUT_MS: number;

/** How long, by default, calls wait for a connection attempt: 1000 ms (see ClientOptions.connectTimeoutMs). */
export declare const DEFAULT_CONNECT_TIMEOUT_MS: number;

/** How long, at most, a release waits for ratelimitd: 1000 ms (it runs even after the acquire was aborted). */
export declare const RELEASE_TIMEOUT_MS: number;

/** How long, at most, a refusal is remembered by default: 1000 ms. */
export declare const DEFAULT_REFUSAL_CACHE_MS: number;

/** How many refusals are remembered at most by default: 10000. */
export declare const DEFAULT_REFUSAL_CACHE_SIZE: number;

/** The problem type (RFC 9457) of the middleware's 429 body. */
export declare const QUOTA_EXCEEDED: 'https://iana.org/assignments/http-problem-types#quota-exceeded';

/** One key/value pair of a Descriptor. */
export interface Entry {
  /** Names the entry, such as "remote_address": 1 to 1024 bytes. */
  key: string;
  /**
   * Any bytes, of any length: a value over 1024 bytes is sent as its
   * SHA-256 digest, bytes that are not UTF-8 as raw bytes.
   */
  value: string | Uint8Array;
}

/** A per-request limit replacing the configured ones of a descriptor. */
export interface LimitOverride {
  /** Requests admitted per window; 0 refuses everything. */
  requests: number;
  /** The window in milliseconds: a whole number of microseconds from 1 ms to 100 years (of 365 days); else the call rejects with code 3. */
  windowMs: number;
}

/** One counter of a request: entries matched, outermost first, against the domain's rules. */
export interface Descriptor {
  /** 1 to 32 entries, outermost first. */
  entries: Entry[];
  /** How much the work consumes on this descriptor; 0 or absent means 1. */
  hits?: number;
  /** Ask whether the counter is already past its limit, consuming nothing (hits is ignored). */
  checkOnly?: boolean;
  /** Replaces the configured limits of this descriptor for this request (the domain must exist). */
  limit?: LimitOverride;
  /**
   * Gives hits back instead of taking them (the native API's give_back,
   * Envoy's negative hits), for work counted ahead that did not happen:
   * never refused, never past the limit, applied whatever the request's
   * other descriptors decide. A request holding one is always sent, never
   * refused from the memory of refusals. Not with checkOnly, nor in
   * acquire (a malformed request, code 3).
   */
  giveBack?: boolean;
}

/** How a limit counts, named as in the rules' YAML ('' when unknown). */
export type Algorithm = 'sliding_window' | 'fixed_window' | 'sliding_log' | 'token_bucket' | 'gcra' | 'concurrency' | '';

/** A configured (or overridden) limit. */
export interface Limit {
  /** The limit's name, or else the rule's key path. */
  name: string;
  /** Requests admitted per window. */
  requests: number;
  windowMs: number;
  algorithm: Algorithm;
  /** Hits that may pass at once (token bucket, GCRA); else requests. */
  burst: number;
}

/** The decision on one descriptor. */
export interface Status {
  overLimit: boolean;
  /** The limit that decided; null when none applies or the rule is unlimited. */
  limit: Limit | null;
  /** Hits the limit admits now (4294967295 when unlimited). */
  remaining: number;
  resetAfterMs: number;
  /** Time until the same hits would be admitted; 0 when admitted. */
  retryAfterMs: number;
  /** The rule is unlimited: nothing was counted. */
  unlimited: boolean;
}

/** One HTTP header field. */
export interface Header {
  name: string;
  value: string;
}

/** The answer to one shouldRateLimit call. */
export interface Decision {
  /** Whether the work may proceed. */
  allowed: boolean;
  /** One per request descriptor, in order; empty when the failure policy decided. */
  statuses: Status[];
  /** When refused: the longest retryAfterMs of the descriptors over their limit; else 0. */
  retryAfterMs: number;
  /**
   * The HTTP headers ratelimitd asks the caller to send (RateLimit-Policy,
   * RateLimit, Retry-After...). For a local decision, those of the
   * remembered refusal, counted down: Retry-After from retryAfterMs, the t
   * parameters of RateLimit and RateLimit-Reset by the whole seconds elapsed.
   */
  headers: Header[];
  /**
   * ratelimitd's failure when the failure policy decided (allowed is then
   * true, or false with failClosed); a NoAssignmentError for a Quota's;
   * null when ratelimitd, or its assignment, decided.
   */
  error: ServiceError | Error | null;
  /**
   * Decided without calling ratelimitd: a Quota's decision, or the
   * Client's refusal of a request it remembers refused. A remembered
   * refusal's durations (retryAfterMs, the statuses' resetAfterMs and
   * retryAfterMs) are counted down to now; the rest is as remembered.
   */
  local: boolean;
}

/** What the onDecision hook is told besides the decision. */
export interface DecisionInfo {
  domain: string;
  descriptors: Descriptor[];
}

/** A logger: console by default. */
export interface Logger {
  warn(message: string): void;
  error(message: string): void;
}

export interface ClientOptions {
  /**
   * The budget of one call in ms (default 50); past it the failure policy
   * decides. It starts once the connection is ready (see
   * connectTimeoutMs). <= 0: none.
   */
  timeoutMs?: number;
  /**
   * The connect budget in ms (default 1000, DEFAULT_CONNECT_TIMEOUT_MS;
   * <= 0: calls never wait). The Client asks its channel to connect when
   * made, and a call made while the channel is idle or connecting waits
   * for it before its own budget starts, so that a handshake longer than
   * the budget (TLS, a distant or loaded ratelimitd, the first calls after
   * a deploy, a reconnection after ratelimitd restarted) does not make
   * calls fail open. The budget is counted from the start of a connection
   * attempt (when the Client is made, or at the first call finding the
   * channel not ready after it was), not per call: once it is spent, no
   * call waits until the channel has been ready again, so a host that
   * accepts connections but never answers delays calls once. Calls never
   * wait in TRANSIENT_FAILURE (ratelimitd refused or failed the handshake;
   * grpc-js retries with backoff): the failure policy decides at once. A
   * stub client without getChannel() is used as it is: calls do not wait.
   */
  connectTimeoutMs?: number;
  /** Refuse, instead of allowing, when ratelimitd fails or is too slow. */
  failClosed?: boolean;
  /** Called with every decision, including the failure policy's. Errors it throws are logged. */
  onDecision?: (decision: Decision, info: DecisionInfo) => void;
  /** Where the UNIMPLEMENTED error and hook errors go (logger.error); console by default. */
  logger?: Logger;
  /** Credentials of the connection; insecure by default. */
  credentials?: ChannelCredentials;
  /** Options of the gRPC channel. */
  channelOptions?: ChannelOptions;
  /**
   * When ratelimitd refuses a request with a retry-after of T ms, the
   * Client refuses the same request (domain, and descriptors with the same
   * entries, hits, checkOnly and limit, in the same order) by itself for
   * min(T, refusalCacheMs), without a call: decision.local is then true.
   * Default 1000 (DEFAULT_REFUSAL_CACHE_MS); <= 0 turns the memory off.
   */
  refusalCacheMs?: number;
  /**
   * How many distinct refused requests are remembered at most; when full,
   * the expired ones are forgotten first, else the oldest. Default 10000
   * (DEFAULT_REFUSAL_CACHE_SIZE); <= 0 turns the memory off.
   */
  refusalCacheSize?: number;
  /** The refusal memory's clock, in ms, never going back (tests); performance.now by default. */
  clock?: () => number;
  /**
   * Renew each lease acquire holds halfway to its expiry (no sooner than
   * 100 ms), until it is released: for work that may outlive its limit's
   * window. A slot is then held as long as the work, and a release never
   * called leaks it for as long as the process lives. A lease lost all the
   * same (ratelimitd away past its expiry) is logged (warn). Default false.
   */
  autoRenew?: boolean;
}

export interface CallOptions {
  /** Aborting it rejects the call with the signal's reason (not a failure of ratelimitd). */
  signal?: AbortSignal;
  /** This call's budget in ms, instead of the Client's. */
  timeoutMs?: number;
}

/**
 * What the middleware and code that asks for decisions need: a Client, a
 * Quota, or a FakeRateLimiter in tests.
 */
export interface RateLimiter {
  /**
   * Asks whether the work described by descriptors may proceed under the
   * rules of domain; rejects only for a malformed request (a
   * RateLimitError with code 3) or when options.signal aborts.
   */
  shouldRateLimit(domain: string, descriptors: Descriptor[], options?: CallOptions): Promise<Decision>;
}

/**
 * A client of ratelimitd's native API (ratelimit.v1). It fails open by
 * default, within a 50 ms budget per call (after waiting up to 1 s for the
 * connection: see connectTimeoutMs), remembers refusals for up to 1 s (see
 * refusalCacheMs), and logs once, at error, if the server does not
 * implement the native API (such as envoyproxy/ratelimit). Code must
 * expect decisions of the failure policy, first calls included: error
 * set, statuses empty.
 */
export declare class Client implements RateLimiter {
  /**
   * @param target ratelimitd's gRPC address ("127.0.0.1:8081"), or a
   *   ratelimitV1.RateLimitServiceClient, which the caller keeps and closes.
   */
  constructor(target: string | ratelimitV1.RateLimitServiceClient, options?: ClientOptions);
  /** How many calls the failure policy allowed (fail open). */
  readonly failOpens: number;
  /** How many calls the failure policy decided, open or closed. */
  readonly failures: number;
  /** How many requests the Client refused by itself, from its memory of refusals, without calling ratelimitd. */
  readonly localRefusals: number;
  /**
   * Asks whether the work described by descriptors may proceed under the
   * rules of domain. Over the limit is a decision, not an error; so is a
   * failure of ratelimitd (see Decision.error). It rejects only for a
   * malformed request (an error with code 3, INVALID_ARGUMENT, found
   * before any RPC or answered by ratelimitd), or when signal aborts.
   */
  shouldRateLimit(domain: string, descriptors: Descriptor[], options?: CallOptions): Promise<Decision>;
  /**
   * Takes slots of the concurrency limits (algorithm: concurrency) of
   * domain's rules that descriptors match (their other limits count as in
   * shouldRateLimit), and resolves to the Lease holding them: release it
   * once the work is done, in finally (or use withSlot). Lease.decision is
   * shouldRateLimit's: refused, or decided by the failure policy, nothing
   * is held and release does nothing; so where no concurrency limit
   * applies. Rejects as shouldRateLimit does (a giveBack descriptor is
   * malformed here). The memory of refusals is not used.
   */
  acquire(domain: string, descriptors: Descriptor[], options?: CallOptions): Promise<Lease>;
  /**
   * Resolves once connected, or rejects after timeoutMs (default 5000).
   * Calls need not: they wait for the connection themselves (see
   * connectTimeoutMs); this is for start-up checks.
   */
  waitForReady(timeoutMs?: number): Promise<void>;
  /** Closes the connection the Client made (not one it was given). */
  close(): void;
}

/**
 * The slots one Client.acquire took, until release gives them back or the
 * lease expires (expiresAt); renew extends it.
 */
export declare class Lease {
  private constructor();
  /** The acquire's decision, as shouldRateLimit's. */
  readonly decision: Decision;
  /** Whether the work may proceed: decision.allowed. */
  readonly allowed: boolean;
  /** When the slots free themselves unless renewed (ratelimitd's clock); null when nothing is held. */
  readonly expiresAt: Date | null;
  /**
   * Gives the slots back, exactly those, once: later calls return the
   * first one's promise. It waits for ratelimitd at most
   * RELEASE_TIMEOUT_MS, even when the acquire was aborted, and rejects
   * with ratelimitd's error when it could not be told: the slots then
   * free themselves when the lease expires (the limit's window).
   */
  release(): Promise<void>;
  /**
   * Extends the lease to a full lease from now, for work that outlives
   * it. Rejects with a LeaseLostError once it has expired or was released,
   * and with ratelimitd's error when it could not be asked within the
   * budget (the lease then still ends at expiresAt). Does nothing when
   * nothing was ever held.
   */
  renew(options?: CallOptions): Promise<void>;
}

/**
 * Runs fn(lease) holding a slot of client.acquire(domain, descriptors),
 * and releases it in finally, whatever fn does (a failed release is
 * logged, not thrown). Resolves to fn's result; rejects with a
 * SlotRefusedError, without calling fn, when the slot is refused.
 */
export declare function withSlot<T>(
  client: Client,
  domain: string,
  descriptors: Descriptor[],
  fn: (lease: Lease) => T | Promise<T>,
  options?: CallOptions,
): Promise<T>;

/** A descriptor of one hit whose entries are kv as key, value pairs: D('path', '/login', 'remote_address', ip). */
export declare function D(...kv: Array<string | Uint8Array>): Descriptor;

export interface MiddlewareOptions {
  /** Adds [api_key=<value of this header>] when the request has it. */
  apiKeyHeader?: string;
  /** Adds [remote_address=<client network>]: the IPv4 address, or the IPv6 /64. */
  clientIP?: boolean;
  /**
   * CIDR prefixes (or addresses) of the proxies trusted to report the
   * client in proxyHeader; without them no header is read. Setting it
   * turns clientIP on unless clientIP is false.
   */
  trustedProxies?: string[];
  /** "X-Forwarded-For" (default), "Forwarded" (RFC 7239), or another list header such as "X-Real-IP". */
  proxyHeader?: string;
  /** Leading bits of an IPv4 client counted together: 1 to 32, default 32. */
  ipv4Prefix?: number;
  /** Leading bits of an IPv6 client counted together: 1 to 128, default 64. */
  ipv6Prefix?: number;
  /** Adds [path=<route>, method=<method>]: true for the request's path, or a function naming the route. */
  route?: boolean | ((req: IncomingMessage) => string | Uint8Array);
  /** Adds these descriptors, after the others (a custom key function). */
  descriptors?: (req: IncomingMessage) => Descriptor[] | Promise<Descriptor[]>;
  /** Requests for which it returns true pass without asking ratelimitd. */
  skip?: (req: IncomingMessage) => boolean | Promise<boolean>;
  /**
   * Answers a request whose route, descriptors or skip function threw (next
   * is not called: a caller able to make the key fail would otherwise escape
   * every limit). Default: 400 "rate limit: cannot attribute the request",
   * err logged at warn. Return no descriptors instead to let a request through.
   */
  keyErrorHandler?: (req: IncomingMessage, res: ServerResponse, err: unknown) => void | Promise<void>;
  /** Adds X-RateLimit-Limit, -Remaining and -Reset of the tightest limit. */
  xRateLimitHeaders?: boolean;
  /** Where key-function failures (warn) and malformed descriptors (error) are logged; not logged by default. */
  logger?: Logger;
}

/**
 * An Express-style middleware asking client (a Client, a Quota, any
 * RateLimiter), under the rules of domain,
 * whether each request may proceed; with node:http, call it as
 * mw(req, res, () => handler(req, res)). Without descriptor options it
 * counts the client IP and the route. Allowed: ratelimitd's headers are
 * set and next is called. Refused: 429 with Retry-After and an
 * application/problem+json body. ratelimitd failing: next without
 * headers (fail open) or 503 (failClosed). Malformed descriptors: 500.
 * A key function (route, descriptors, skip) throwing: keyErrorHandler,
 * 400 by default. Headers from ratelimitd that Node cannot send are
 * dropped; none are set once another handler answered; other errors go
 * to next(err), never to an unhandled rejection.
 * A refused client's repeats are answered from the Client's memory of
 * refusals (see ClientOptions.refusalCacheMs), with the headers counted
 * down, without asking ratelimitd.
 */
export declare function middleware(
  client: RateLimiter,
  domain: string,
  options?: MiddlewareOptions,
): (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => Promise<void>;

/**
 * The client's IP address of req, or null when unknown: the peer, or when
 * the peer is a trusted proxy, the right-most untrusted address of proxyHeader.
 */
export declare function clientIP(req: IncomingMessage, options?: { trustedProxies?: string[]; proxyHeader?: string }): string | null;

export interface QuotaOptions {
  /** The domain whose rules decide: required, 1 to 256 bytes of UTF-8. */
  domain: string;
  /** How often the Quota reports its use, in ms; 0 or absent: 5000 (DEFAULT_REPORTING_INTERVAL_MS). Assignments live twice as long. */
  reportingIntervalMs?: number;
  /** Refuse, instead of allowing (the default, as Client does), the descriptors of buckets without an assignment in force. */
  failClosed?: boolean;
  /** The most buckets held; past it new buckets are decided by the failure policy (counted in overflows). 0 or absent: 10000. */
  maxBuckets?: number;
  /** Where the stream's failures go (logger.warn); console by default. */
  logger?: Logger;
  /** Replaces performance.now for token buckets and times to live (tests): ms, never going back. Reports follow real time. */
  clock?: () => number;
  /** Credentials of the connection the Quota makes for an address; insecure by default. */
  credentials?: ChannelCredentials;
  /** Options of that connection. */
  channelOptions?: ChannelOptions;
}

/**
 * A Quota decides locally whether work may proceed, under the
 * assignments ratelimitd sends over Envoy's Rate Limit Quota Service
 * (RLQS), as the Go client's Quota does. Each descriptor is a bucket,
 * whose entries (as a map: in any order) are the bucket id. The Quota
 * reports each bucket's use over one stream, at its first use and every
 * reportingIntervalMs; ratelimitd answers with the bucket's assignment:
 * a token bucket (this client's share of the rule's limit), allow all or
 * deny all, for a time to live (twice the interval), and may abandon a
 * bucket (forgotten, reported afresh at its next use). A bucket unused
 * for QUOTA_IDLE_INTERVALS intervals is forgotten. Until a bucket's
 * assignment arrives, after it expires (ratelimitd unreachable), or past
 * maxBuckets, the failure policy decides: allow (default) or refuse
 * (failClosed). The stream waits for the connection and reconnects with
 * backoff (100 ms doubling to 10 s). The Quota keeps the process alive
 * until close().
 */
export declare class Quota implements RateLimiter {
  /**
   * @param target ratelimitd's gRPC address ("127.0.0.1:8081"), or a
   *   @grpc/grpc-js Client (such as an rlqsV3.RateLimitQuotaServiceClient)
   *   whose channel to use, which the caller keeps and closes after close().
   * @throws RateLimitError (code 3) for bad options.
   */
  constructor(target: string | GrpcClient, options: QuotaOptions);
  /** The domain whose rules decide. */
  readonly domain: string;
  /** How many calls the failure policy allowed, failing open. */
  readonly failOpens: number;
  /** How many calls found maxBuckets held, so that the failure policy decided a new bucket. */
  readonly overflows: number;
  /** How many buckets the Quota holds. */
  readonly size: number;
  /**
   * Whether the work may proceed: only if each descriptor's bucket admits
   * it, and a refused call consumes nothing. A descriptor takes hits
   * tokens (0 or absent: 1) from a token bucket, a checkOnly one none.
   * Synchronous, no RPC. Throws a RateLimitError (code 3) for a malformed
   * call: no descriptors, over 64, a descriptor without entries or over
   * 32, an empty key, a key twice, or a limit override (which RLQS cannot
   * carry). Values may be strings or bytes of any kind.
   */
  allow(descriptors: Descriptor[]): boolean;
  /**
   * allow as a RateLimiter, for the middleware: domain must be the
   * Quota's. The Decision has no headers and is local; refused by a token
   * bucket, its retryAfterMs is the time to that bucket's next fill and
   * the statuses mark the descriptor that refused; decided by the failure
   * policy, error is a NoAssignmentError.
   */
  shouldRateLimit(domain: string, descriptors: Descriptor[], options?: CallOptions): Promise<Decision>;
  /**
   * Ends the reporting stream and its timers, and closes the connection
   * the Quota made (not one it was given). Assignments received still
   * decide until they expire; new buckets get the failure policy.
   */
  close(): void;
}

/** One answer of a FakeRateLimiter: a Decision, or a promise of one; throwing rejects the call. */
export type FakeAnswer = (domain: string, descriptors: Descriptor[]) => Decision | Promise<Decision>;

/** One call a FakeRateLimiter answered. */
export interface FakeCall {
  domain: string;
  /** A copy of the caller's. */
  descriptors: Descriptor[];
  /** null when the call rejected. */
  decision: Decision | null;
  /** What the call rejected with, or null. */
  error: unknown;
}

/**
 * A RateLimiter answering by a script, for the tests of code that takes a
 * RateLimiter (and the middleware): no ratelimitd. Like a Client, it
 * rejects a malformed request with its RateLimitError (code 3), and an
 * aborted call with the signal's reason, before any answer; other calls
 * take the next queued answer (push), else the default (setDefault),
 * else allow. Every call is recorded (calls).
 */
export declare class FakeRateLimiter implements RateLimiter {
  constructor();
  /** An answer allowing the call. */
  static allow(): FakeAnswer;
  /** An answer refusing the call, to retry in retryAfterMs, with its Retry-After header. */
  static refuse(retryAfterMs: number): FakeAnswer;
  /** A Client failing open: allowed, error set (err, or a RateLimitError with code 14). */
  static failOpen(err?: Error): FakeAnswer;
  /** A Client failing closed: refused, error set (err, or a RateLimitError with code 14). */
  static failClosed(err?: Error): FakeAnswer;
  /** An answer rejecting the call with err. */
  static fail(err: unknown): FakeAnswer;
  /** Queues answers for the next calls, in order. */
  push(...answers: FakeAnswer[]): void;
  /** Sets the answer once the queue is empty; null restores allow. */
  setDefault(answer: FakeAnswer | null): void;
  /** The calls answered, in order. */
  readonly calls: FakeCall[];
  /** Forgets the calls, the queue and the default answer. */
  reset(): void;
  shouldRateLimit(domain: string, descriptors: Descriptor[], options?: CallOptions): Promise<Decision>;
}
