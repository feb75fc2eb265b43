#!/usr/bin/env python3
"""A real gRPC upstream for maitred's integration tests and demo.

Serves maitred.testing.v1.Echo on 127.0.0.1:--port (h2c, or TLS with
--tls-cert/--tls-key, mTLS with --client-ca) and maitred.testing.v1.Control on
a second cleartext port, the side channel a test uses to ask what happened to
a call ("did the upstream see call X cancelled?") without going through
maitred. When ready it writes {"port", "control_port", "pid", "name"} as JSON
to --ready-file. SIGTERM (or SIGINT) stops both servers gracefully (GOAWAY,
in-flight calls get --grace seconds) and exits 0.

Every Echo call: echoes request metadata whose key starts with "x-" (including
-bin keys) as initial metadata and as trailers, adds "maitred-instance: NAME"
to both, and does what the EchoRequest asks (see echo.proto).
"""

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import protogen  # noqa: E402

pb, pb_grpc = protogen.load()

CODES = {c.value[0]: c for c in grpc.StatusCode}
HOLD_LIMIT_S = 120.0
BARRIER_LIMIT_S = 60.0
_PATTERN = bytes(range(256)) * 4096  # 1 MiB


def pattern(n):
    """n deterministic bytes (so a corrupted relay is noticed)."""
    if n <= len(_PATTERN):
        return _PATTERN[:n]
    reps = n // len(_PATTERN) + 1
    return (_PATTERN * reps)[:n]


def log(msg):
    sys.stderr.write("upstream[%s] %s\n" % (ARGS.name if ARGS else "?", msg))
    sys.stderr.flush()


ARGS = None
ORCA_KEY = "endpoint-load-metrics-bin"
ORCA_REPORT = None  # the serialized OrcaLoadReport every answer's trailers carry (--orca-*)


def orca_report(cpu=0.0, app=0.0, qps=0.0, eps=0.0, mem=0.0):
    """A serialized xds.data.orca.v3.OrcaLoadReport (also what the tests
    compare the app's trailer with)."""
    m = protogen.load_orca().OrcaLoadReport(cpu_utilization=cpu, application_utilization=app,
                                             rps_fractional=qps, eps=eps, mem_utilization=mem)
    m.named_metrics["queue"] = 1.0
    return m.SerializeToString()
SLOW_RNG = random.Random()  # --slow-fraction's draws (random() holds the GIL: thread-safe)


class Call:
    """One Echo call as the upstream sees it (tracked when it has a call_id)."""

    def __init__(self, call_id):
        self.call_id = call_id
        self.method = ""
        self.started = False
        self.ended = False
        self.cancelled = False
        self.handler_done = False
        self.sent = 0
        self.received = 0
        self.time_remaining = -1.0
        self.end_event = threading.Event()
        self.release = threading.Event()


class Registry:
    def __init__(self):
        self.cond = threading.Condition()
        self.calls = {}
        self.by_method = {}
        self.total = 0
        self.cancelled = 0
        self.peers = set()  # context.peer() of Echo calls and health checks
        self.health_checks = 0
        self.health_cancelled = 0

    def get(self, call_id):
        """The tracked call (created on first mention); caller holds cond."""
        c = self.calls.get(call_id)
        if c is None:
            c = Call(call_id)
            self.calls[call_id] = c
        return c

    def notify(self):
        with self.cond:
            self.cond.notify_all()


REG = Registry()
FAIL_LOCK = threading.Lock()
FAIL_SEEN = [0]  # Echo calls --fail-every has counted
BARRIERS = {}
BARRIER_COND = threading.Condition()


class EchoServicer(pb_grpc.EchoServicer):
    # --- call bookkeeping ------------------------------------------------
    def _begin(self, context, call_id, method):
        # The full :path when grpcio lets us see it (routing tests count
        # calls per service), else the method name.
        try:
            path = context._rpc_event.call_details.method
            method = path.decode() if isinstance(path, bytes) else path
        except AttributeError:
            pass
        with REG.cond:
            REG.peers.add(context.peer())
            call = REG.get(call_id) if call_id else Call("")
            call.method = method
            call.started = True
            tr = context.time_remaining()
            call.time_remaining = -1.0 if tr is None or tr > 1e8 else tr
            REG.total += 1
            REG.by_method[method] = REG.by_method.get(method, 0) + 1
            REG.cond.notify_all()

        def on_end():
            with REG.cond:
                if not call.handler_done:
                    call.cancelled = True
                    REG.cancelled += 1
                call.ended = True
                call.end_event.set()
                REG.cond.notify_all()
            if call_id:
                log("call %s %s ended%s" % (call_id, method, " (cancelled)" if call.cancelled else ""))

        if not context.add_callback(on_end):
            on_end()
        if call_id:
            log("call %s %s started (time remaining %.3f)" % (call_id, method, call.time_remaining))
        return call

    def _end(self, call, context=None):
        # A handler that returns because the RPC was cancelled (its request
        # iterator just stops) did not finish: leave handler_done unset so
        # the end callback records the cancellation, whichever runs first.
        if context is not None and not context.is_active():
            return
        with REG.cond:
            call.handler_done = True
            REG.cond.notify_all()

    def _count(self, call, sent=0, received=0):
        with REG.cond:
            call.sent += sent
            call.received += received
            REG.cond.notify_all()

    # --- pieces of behaviour ----------------------------------------------
    def _echo_md(self, context):
        md = [(k, v) for k, v in context.invocation_metadata() if k.startswith("x-")]
        md.append(("maitred-instance", ARGS.name))
        return md

    def _prelude(self, call, req, context):
        """--slow-fraction's wait, initial metadata, then barrier, hold,
        raise. Returns False when the call ended meanwhile."""
        if ARGS.slow_fraction > 0 and SLOW_RNG.random() < ARGS.slow_fraction:
            # Drawn per call by this instance, before anything is sent (a
            # server slow to start answering: queueing, a pause): a tail the
            # client cannot choose, and that a hedge elsewhere can beat.
            # Headers sent before the wait would commit the call to this
            # attempt (gRPC A6) and no hedge could.
            if call.end_event.wait(ARGS.slow_ms / 1000.0):
                return False
        if ARGS.fail_status and ARGS.fail_every > 1:
            # --fail-every N: only the Nth, 2Nth... call fails.
            with FAIL_LOCK:
                FAIL_SEEN[0] += 1
                fail = FAIL_SEEN[0] % ARGS.fail_every == 0
        else:
            fail = bool(ARGS.fail_status)
        if fail:
            # --fail-status: this instance answers every call with it,
            # Trailers-Only (no initial metadata), plus --fail-trailer.
            context.set_trailing_metadata([tuple(t.split("=", 1)) for t in ARGS.fail_trailer])
            context.abort(CODES.get(ARGS.fail_status, grpc.StatusCode.UNKNOWN),
                          "instance %s fails every call" % ARGS.name)
        if not req.trailers_only:
            context.send_initial_metadata(self._echo_md(context))
        if req.barrier:
            with BARRIER_COND:
                BARRIERS[req.barrier] = BARRIERS.get(req.barrier, 0) + 1
                BARRIER_COND.notify_all()
                ok = BARRIER_COND.wait_for(
                    lambda: BARRIERS[req.barrier] >= req.barrier_count or call.ended,
                    timeout=BARRIER_LIMIT_S)
                n = BARRIERS[req.barrier]
            if not ok:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "barrier %s: only %d of %d calls arrived" % (req.barrier, n, req.barrier_count))
        if req.hold:
            self._hold(call, context)
        if req.raise_error:
            raise RuntimeError("raise_error requested")
        if req.compress_response:
            context.set_compression(grpc.Compression.Gzip)
        return not call.ended

    def _hold(self, call, context):
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not call.release.is_set() and not call.ended:
            left = deadline - time.monotonic()
            if left <= 0:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "hold: never released")
            call.release.wait(min(left, 0.2))

    def _trailers(self, req, context):
        md = self._echo_md(context)
        md.extend((t.key, t.value if t.key.endswith("-bin") else t.value.decode()) for t in req.status.trailers)
        # An ORCA load report (--orca-*), unless the request asked for
        # its own endpoint-load-metrics-bin or --orca-off-file exists.
        if ORCA_REPORT is not None and not any(t.key == ORCA_KEY for t in req.status.trailers) and \
                not (ARGS.orca_off_file and os.path.exists(ARGS.orca_off_file)):
            md.append((ORCA_KEY, ORCA_REPORT))
        return md

    def _response(self, call, req, context, index, received=0, nbytes=0):
        payload = pattern(req.response_size) if req.response_size else req.payload
        cn = b""
        auth = context.auth_context() or {}
        if auth.get("x509_common_name"):
            cn = auth["x509_common_name"][0]
        md = [pb.Metadatum(key=k, value=v if isinstance(v, bytes) else v.encode())
              for k, v in context.invocation_metadata()]
        return pb.EchoResponse(
            payload=payload, instance=ARGS.name, index=index,
            messages_received=received, bytes_received=nbytes, key=req.key,
            call_id=call.call_id, time_remaining_s=call.time_remaining,
            metadata=md, client_cn=cn.decode(errors="replace"),
            request_payload_size=len(req.payload))

    def _status(self, req, context):
        """End the call with req.status (trailers set by the caller)."""
        context.abort(CODES.get(req.status.code, grpc.StatusCode.UNKNOWN), req.status.message)

    def _delay(self, call, req):
        """Sleep delay_ms; False when the call ended meanwhile."""
        if req.delay_ms:
            return not call.end_event.wait(req.delay_ms / 1000.0)
        return not call.ended

    def _stream_responses(self, call, req, context, base_index=0, received=0, nbytes=0):
        """Responses for one request of a streaming call; sets the status."""
        n = req.response_count or 1
        for i in range(n):
            if req.status.code and i >= req.status_after:
                break
            if req.hold_after and i == req.hold_after:
                self._hold(call, context)
            if not self._delay(call, req):
                return
            yield self._response(call, req, context, base_index + i, received, nbytes)
            self._count(call, sent=1)
        if req.status.code:
            self._status(req, context)

    # --- the four call types ---------------------------------------------
    def Unary(self, request, context):
        call = self._begin(context, request.call_id, "Unary")
        try:
            context.set_trailing_metadata(self._trailers(request, context))
            if not self._prelude(call, request, context):
                return pb.EchoResponse()
            if not self._delay(call, request):
                return pb.EchoResponse()
            if request.status.code:
                self._status(request, context)
            resp = self._response(call, request, context, 0, 1, len(request.payload))
            self._count(call, sent=1, received=1)
            return resp
        finally:
            self._end(call)

    def ClientStream(self, request_iterator, context):
        it = iter(request_iterator)
        first = next(it, None)
        if first is None:
            first = pb.EchoRequest()
        call = self._begin(context, first.call_id, "ClientStream")
        try:
            self._count(call, received=1)
            count, nbytes = 1, len(first.payload)
            context.set_trailing_metadata(self._trailers(first, context))
            if not self._prelude(call, first, context):
                return pb.EchoResponse()
            if first.hold_before_read:
                self._hold(call, context)
            for req in it:
                count += 1
                nbytes += len(req.payload)
                self._count(call, received=1)
            if not self._delay(call, first):
                return pb.EchoResponse()
            if first.status.code:
                self._status(first, context)
            return self._response(call, first, context, 0, count, nbytes)
        finally:
            self._end(call)

    def ServerStream(self, request, context):
        call = self._begin(context, request.call_id, "ServerStream")
        try:
            context.set_trailing_metadata(self._trailers(request, context))
            if not self._prelude(call, request, context):
                return
            if request.status.code and request.status_after == 0:
                self._status(request, context)
            yield from self._stream_responses(call, request, context, 0, 1, len(request.payload))
        finally:
            self._end(call)

    def BidiStream(self, request_iterator, context):
        it = iter(request_iterator)
        first = next(it, None)
        if first is None:
            return
        call = self._begin(context, first.call_id, "BidiStream")
        try:
            context.set_trailing_metadata(self._trailers(first, context))
            if not self._prelude(call, first, context):
                return
            index, count, nbytes = 0, 0, 0
            req = first
            while req is not None:
                count += 1
                nbytes += len(req.payload)
                self._count(call, received=1)
                if req.status.code and req.status_after == 0:
                    context.set_trailing_metadata(self._trailers(req, context))
                    self._status(req, context)
                for resp in self._stream_responses(call, req, context, index, count, nbytes):
                    index += 1
                    yield resp
                if call.ended:
                    return
                req = next(it, None)
        finally:
            self._end(call, context)


class AnyService(grpc.GenericRpcHandler):
    """Echo's four methods under any service name (/pkg.Svc/Unary ...), so
    routing tests can tell which upstream a service was sent to."""

    def __init__(self, servicer):
        kw = dict(request_deserializer=pb.EchoRequest.FromString,
                  response_serializer=pb.EchoResponse.SerializeToString)
        self.handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(servicer.Unary, **kw),
            "ClientStream": grpc.stream_unary_rpc_method_handler(servicer.ClientStream, **kw),
            "ServerStream": grpc.unary_stream_rpc_method_handler(servicer.ServerStream, **kw),
            "BidiStream": grpc.stream_stream_rpc_method_handler(servicer.BidiStream, **kw),
        }

    def service(self, handler_call_details):
        return self.handlers.get(handler_call_details.method.rsplit("/", 1)[-1])


class HealthService(grpc.GenericRpcHandler):
    """grpc.health.v1.Health/Check (gRPC doc/health-checking.md) answering
    what --health-file says. Each line is `STATUS ...` for the server as a
    whole (HealthCheckRequest.service ""), or `SERVICE=STATUS ...` for one
    service; a service with no line is NOT_FOUND (the gRPC health spec). A
    STATUS is SERVING; HOLD: no answer until the call ends (cancelled, or
    its deadline; bounded: 30 s); anything else NOT_SERVING (a missing
    file too). Several STATUS words are answered in turn, one per check,
    the last one repeating (counted from the moment the file reads so).
    Each check is logged with the service asked for. The messages are
    built by hand (field 1), so no generated health code is needed."""

    def __init__(self, path):
        self.path = path
        self.turns = {}  # (file content, service) -> checks answered from it

    @staticmethod
    def _service(request):
        # HealthCheckRequest: field 1 (service), length-delimited.
        if len(request) < 2 or request[0] != 0x0a:
            return ""
        n, i, shift = 0, 1, 0
        while i < len(request):
            b = request[i]
            n |= (b & 0x7f) << shift
            i += 1
            shift += 7
            if not b & 0x80:
                break
        return request[i:i + n].decode(errors="replace")

    def _check(self, request, context):
        service = self._service(request)
        with REG.cond:
            REG.peers.add(context.peer())
            REG.health_checks += 1
        try:
            with open(self.path) as f:
                content = f.read().strip()
        except OSError:
            content = ""
        words = None
        for line in content.splitlines() or [""]:
            name, _, rest = line.strip().rpartition("=")
            if name == service:
                words = rest.split() or [""]
        if words is None:
            log("health check service=%r: NOT_FOUND" % service)
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service %r" % service)
        with REG.cond:
            turn = self.turns.get((content, service), 0)
            self.turns[(content, service)] = turn + 1
        status = words[min(turn, len(words) - 1)]
        log("health check service=%r: %s" % (service, status or "NOT_SERVING"))
        if status == "HOLD":
            end = time.monotonic() + 30
            while context.is_active() and time.monotonic() < end:
                time.sleep(0.01)
            with REG.cond:
                REG.health_cancelled += 0 if context.is_active() else 1
            return b"\x08\x02"
        return b"\x08\x01" if status == "SERVING" else b"\x08\x02"

    def service(self, handler_call_details):
        if handler_call_details.method != "/grpc.health.v1.Health/Check":
            return None
        return grpc.unary_unary_rpc_method_handler(self._check)


class ControlServicer(pb_grpc.ControlServicer):
    def _state(self, c):
        return pb.CallState(call_id=c.call_id, started=c.started, ended=c.ended,
                            cancelled=c.cancelled, messages_sent=c.sent,
                            messages_received=c.received,
                            time_remaining_s=c.time_remaining, method=c.method)

    def WaitCall(self, request, context):
        until = request.until or pb.WaitCallRequest.STARTED
        with REG.cond:
            c = REG.get(request.call_id)
            if until == pb.WaitCallRequest.ENDED:
                pred = lambda: c.ended  # noqa: E731
            else:
                pred = lambda: c.started  # noqa: E731
            REG.cond.wait_for(pred, timeout=request.timeout_ms / 1000.0)
            return self._state(c)

    def Release(self, request, context):
        with REG.cond:
            c = REG.get(request.call_id)
            c.release.set()
            return self._state(c)

    def Stats(self, request, context):
        with REG.cond:
            return pb.StatsResponse(instance=ARGS.name, calls=dict(REG.by_method),
                                    total=REG.total, cancelled=REG.cancelled,
                                    peers=len(REG.peers), health_checks=REG.health_checks,
                                    health_cancelled=REG.health_cancelled)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, default=0, help="0 = any free port")
    ap.add_argument("--control-port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca", help="require client certificates signed by this CA")
    ap.add_argument("--ready-file")
    ap.add_argument("--grace", type=float, default=5.0, help="seconds in-flight calls get on SIGTERM")
    ap.add_argument("--max-workers", type=int, default=256)
    ap.add_argument("--fail-status", type=int, default=0,
                    help="answer every Echo call with this gRPC status (Trailers-Only)")
    ap.add_argument("--fail-every", type=int, default=1,
                    help="with --fail-status: fail only every Nth Echo call (N > 1), the others as usual")
    ap.add_argument("--fail-trailer", action="append", default=[],
                    help="KEY=VALUE trailing metadata sent with --fail-status")
    ap.add_argument("--max-concurrent-streams", type=int, default=0,
                    help="SETTINGS_MAX_CONCURRENT_STREAMS to advertise (0 = grpcio's default)")
    ap.add_argument("--health-file", help="serve grpc.health.v1.Health/Check from this file's content")
    ap.add_argument("--slow-fraction", type=float, default=0.0,
                    help="this fraction of the Echo calls, drawn per call, waits --slow-ms before it "
                         "answers anything, headers included (default 0)")
    ap.add_argument("--slow-ms", type=int, default=50, help="the wait of a slow call (default 50)")
    ap.add_argument("--seed", type=int, help="seed of the --slow-fraction draws (default: random)")
    ap.add_argument("--orca-cpu", type=float, help="send an ORCA load report (endpoint-load-metrics-bin) in "
                    "every answer's trailers with this cpu_utilization (and the other --orca-* figures)")
    ap.add_argument("--orca-app", type=float, default=0.0, help="the report's application_utilization")
    ap.add_argument("--orca-qps", type=float, default=0.0, help="the report's rps_fractional")
    ap.add_argument("--orca-eps", type=float, default=0.0, help="the report's eps")
    ap.add_argument("--orca-off-file", help="no report while this file exists")
    ARGS = ap.parse_args()
    global ORCA_REPORT
    if ARGS.orca_cpu is not None:
        ORCA_REPORT = orca_report(ARGS.orca_cpu, ARGS.orca_app, ARGS.orca_qps, ARGS.orca_eps)
    if not 0.0 <= ARGS.slow_fraction <= 1.0 or ARGS.slow_ms < 0:
        ap.error("--slow-fraction must be in [0, 1] and --slow-ms >= 0")
    SLOW_RNG.seed(ARGS.seed)

    opts = [("grpc.max_receive_message_length", 256 << 20),
            ("grpc.max_send_message_length", 256 << 20),
            ("grpc.max_metadata_size", 64 * 1024),
            ("grpc.so_reuseport", 0)]
    if ARGS.max_concurrent_streams:
        opts.append(("grpc.max_concurrent_streams", ARGS.max_concurrent_streams))
    echo = grpc.server(futures.ThreadPoolExecutor(max_workers=ARGS.max_workers), options=opts)
    servicer = EchoServicer()
    pb_grpc.add_EchoServicer_to_server(servicer, echo)
    if ARGS.health_file:
        echo.add_generic_rpc_handlers((HealthService(ARGS.health_file),))
    echo.add_generic_rpc_handlers((AnyService(servicer),))
    addr = "%s:%d" % (ARGS.host, ARGS.port)
    if ARGS.tls_cert:
        with open(ARGS.tls_cert, "rb") as f:
            cert = f.read()
        with open(ARGS.tls_key, "rb") as f:
            key = f.read()
        ca = None
        if ARGS.client_ca:
            with open(ARGS.client_ca, "rb") as f:
                ca = f.read()
        creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                            require_client_auth=ca is not None)
        port = echo.add_secure_port(addr, creds)
    else:
        port = echo.add_insecure_port(addr)
    if port == 0:
        log("cannot listen on %s" % addr)
        return 2

    control = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_ControlServicer_to_server(ControlServicer(), control)
    cport = control.add_insecure_port("%s:%d" % (ARGS.host, ARGS.control_port))
    if cport == 0:
        log("cannot listen on control port %d" % ARGS.control_port)
        return 2

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    echo.start()
    control.start()
    log("serving Echo on %s:%d (%s), Control on %s:%d" % (
        ARGS.host, port, "tls" if ARGS.tls_cert else "h2c", ARGS.host, cport))
    if ARGS.ready_file:
        tmp = ARGS.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"port": port, "control_port": cport, "pid": os.getpid(), "name": ARGS.name}, f)
        os.rename(tmp, ARGS.ready_file)
    while not stop.wait(0.5):
        pass
    log("stopping (grace %.1fs)" % ARGS.grace)
    echo.stop(ARGS.grace).wait()
    control.stop(0).wait()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
