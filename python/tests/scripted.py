"""An in-process gRPC server of ratelimit.v1.RateLimitService on loopback
that answers from a script, for the client and middleware tests."""

import queue
import socket
import threading
from concurrent import futures

import grpc

from ratelimitd.v1 import ratelimit_pb2 as pb
from ratelimitd.v1 import ratelimit_pb2_grpc as pb_grpc


class Block:
    """A scripted answer that waits until release() (or the server stops),
    then answers OK: the client's budget ends first."""

    def __init__(self):
        self.event = threading.Event()

    def release(self):
        self.event.set()


class Servicer(pb_grpc.RateLimitServiceServicer):
    """Answers each call with the next scripted answer: a response (of the
    method's type), a (grpc.StatusCode, details) error, or a Block. It
    records the requests."""

    def __init__(self):
        self.script = queue.Queue()
        self.requests = []
        self.blocks = []

    def ShouldRateLimit(self, request, context):
        return self._answer(request, context, pb.ShouldRateLimitResponse)

    # The lease calls answer from the same script, in order.
    def Acquire(self, request, context):
        return self._answer(request, context, pb.AcquireResponse)

    def Release(self, request, context):
        return self._answer(request, context, pb.ReleaseResponse)

    def Renew(self, request, context):
        return self._answer(request, context, pb.RenewResponse)

    def _answer(self, request, context, empty):
        self.requests.append(request)
        try:
            answer = self.script.get_nowait()
        except queue.Empty:
            context.abort(grpc.StatusCode.INTERNAL, "no scripted answer")
        if isinstance(answer, Block):
            self.blocks.append(answer)
            answer.event.wait(30)
            return empty()
        if isinstance(answer, tuple):
            context.abort(*answer)
        return answer


class Server:
    """Serves a Servicer on 127.0.0.1 on a free port; use as a context
    manager. addr is its address."""

    def __init__(self):
        self.servicer = Servicer()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RateLimitServiceServicer_to_server(self.servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"

    def answer(self, *answers):
        for a in answers:
            self.servicer.script.put(a)

    @property
    def requests(self):
        return self.servicer.requests

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        for b in self.servicer.blocks:
            b.release()
        self.server.stop(None)


def duration(seconds, nanos=0):
    from google.protobuf import duration_pb2
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


def ok(*statuses, headers=()):
    """An allowing answer."""
    return pb.ShouldRateLimitResponse(code=pb.CODE_OK, statuses=list(statuses),
                                      headers=[pb.Header(name=n, value=v) for n, v in headers])


def over(*statuses, headers=()):
    """A refusing answer."""
    return pb.ShouldRateLimitResponse(code=pb.CODE_OVER_LIMIT, statuses=list(statuses),
                                      headers=[pb.Header(name=n, value=v) for n, v in headers])


def lease(lease_id, expires_at=0.0):
    """A Lease of lease_id (bytes) expiring at expires_at (Unix seconds)."""
    from google.protobuf import timestamp_pb2
    sec = int(expires_at)
    return pb.Lease(id=lease_id, expires_at=timestamp_pb2.Timestamp(seconds=sec, nanos=int((expires_at - sec) * 1e9)))


def status(over_limit=False, name="", requests=0, window=0, remaining=0, reset=(0, 0), retry=(0, 0),
           algorithm=pb.ALGORITHM_SLIDING_WINDOW, burst=0, unlimited=False, limit=True):
    """A DescriptorStatus."""
    st = pb.DescriptorStatus(code=pb.CODE_OVER_LIMIT if over_limit else pb.CODE_OK, remaining=remaining,
                             reset_after=duration(*reset), retry_after=duration(*retry), unlimited=unlimited)
    if limit:
        st.limit.CopyFrom(pb.Limit(name=name, requests=requests, window=duration(window),
                                   algorithm=algorithm, burst=burst or requests))
    return st


class SlowProxy:
    """A TCP proxy on 127.0.0.1 to upstream ("host:port") that forwards
    each connection it accepts only delay seconds after accepting it: the
    client's TCP handshake completes at once, gRPC's (the server's SETTINGS
    frame) waits, as it does for a server that is starting, loaded or far
    away. drop() closes the connections it forwards, as a server that
    restarts does. It listens on port (0: a free one). Use as a context
    manager; addr is its address. accepted is set once it has accepted a
    connection."""

    def __init__(self, upstream, delay=0.0, port=0):
        host, up = upstream.rsplit(":", 1)
        self.upstream = (host, int(up))
        self.delay = delay
        self.accepted = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._socks = []  # guarded by _lock
        self._listener = socket.create_server(("127.0.0.1", port))
        self.addr = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted.set()
            with self._lock:
                self._socks.append(conn)
            threading.Thread(target=self._forward, args=(conn, self.delay), daemon=True).start()

    def _forward(self, conn, delay):
        if self._closed.wait(delay):
            return
        try:
            up = socket.create_connection(self.upstream)
        except OSError:
            conn.close()
            return
        with self._lock:
            self._socks.append(up)
        threading.Thread(target=_pipe, args=(up, conn), daemon=True).start()
        _pipe(conn, up)

    def drop(self, delay=None):
        """Closes the connections forwarded so far; those accepted from now
        on are forwarded delay seconds later (when given)."""
        if delay is not None:
            self.delay = delay
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._closed.set()
        _close(self._listener)  # shutdown wakes the accepting thread
        self._thread.join()
        self.drop()


def _pipe(src, dst):
    """Copies src to dst until either ends, then closes both."""
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def closed_addr():
    """A loopback address nothing listens on: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]


def hung_listener():
    """A listening socket on loopback that never accepts: the kernel
    completes TCP handshakes, and gRPC's waits for ever (for its connect
    timeout, 20 s). Close it when done; its address is
    "127.0.0.1:%d" % s.getsockname()[1]."""
    return socket.create_server(("127.0.0.1", 0), backlog=16)


def wait_state(channel, *want, timeout=10.0):
    """Waits until channel reports one of the connectivities want, without
    asking it to connect; returns whether it did within timeout. Tests wait so before
    closing a channel a Client subscribed to: grpc's connectivity poller
    logs a traceback when a channel is closed before it has started, or
    while it handles a change (grpc/grpc#18995)."""
    seen = threading.Event()

    def cb(state):
        if state in want:
            seen.set()
    channel.subscribe(cb)
    try:
        return seen.wait(timeout)
    finally:
        channel.unsubscribe(cb)
