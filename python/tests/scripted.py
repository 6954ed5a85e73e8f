"""An in-process gRPC server of ratelimit.v1.RateLimitService on loopback
that answers from a script, for the client and middleware tests."""

import queue
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
    """Answers each call with the next scripted answer: a
    ShouldRateLimitResponse, a (grpc.StatusCode, details) error, or a Block.
    It records the requests."""

    def __init__(self):
        self.script = queue.Queue()
        self.requests = []
        self.blocks = []

    def ShouldRateLimit(self, request, context):
        self.requests.append(request)
        try:
            answer = self.script.get_nowait()
        except queue.Empty:
            context.abort(grpc.StatusCode.INTERNAL, "no scripted answer")
        if isinstance(answer, Block):
            self.blocks.append(answer)
            answer.event.wait(30)
            return pb.ShouldRateLimitResponse(code=pb.CODE_OK)
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


def status(over_limit=False, name="", requests=0, window=0, remaining=0, reset=(0, 0), retry=(0, 0),
           algorithm=pb.ALGORITHM_SLIDING_WINDOW, burst=0, unlimited=False, limit=True):
    """A DescriptorStatus."""
    st = pb.DescriptorStatus(code=pb.CODE_OVER_LIMIT if over_limit else pb.CODE_OK, remaining=remaining,
                             reset_after=duration(*reset), retry_after=duration(*retry), unlimited=unlimited)
    if limit:
        st.limit.CopyFrom(pb.Limit(name=name, requests=requests, window=duration(window),
                                   algorithm=algorithm, burst=burst or requests))
    return st
