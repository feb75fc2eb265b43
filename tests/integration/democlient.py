#!/usr/bin/env python3
"""Send real gRPC calls of maitred.testing.v1.Echo through maitred and print
how they were spread over the upstream instances.

  democlient.py [--target 127.0.0.1:15001] [--calls 300] [--concurrency 4]

Exit 0 when every call succeeded, 1 otherwise.
"""

import argparse
import collections
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import protogen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="127.0.0.1:15001")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=4, help="calls in flight at once")
    ap.add_argument("--timeout", type=float, default=10.0, help="deadline of each call (s)")
    args = ap.parse_args()

    pb, pb_grpc = protogen.load()
    channel = grpc.insecure_channel(args.target)
    try:
        grpc.channel_ready_future(channel).result(timeout=args.timeout)
    except grpc.FutureTimeoutError:
        print("cannot connect to %s" % args.target, file=sys.stderr)
        return 1
    stub = pb_grpc.EchoStub(channel)

    served = collections.Counter()
    errors = collections.Counter()
    lock = threading.Lock()
    sem = threading.Semaphore(max(1, args.concurrency))
    done = threading.Event()
    pending = [args.calls]

    def finished(fut):
        try:
            resp = fut.result()
            key = resp.instance
            with lock:
                served[key] += 1
        except grpc.RpcError as e:
            with lock:
                errors["%s: %s" % (e.code().name, e.details())] += 1
        sem.release()
        with lock:
            pending[0] -= 1
            if pending[0] == 0:
                done.set()

    for i in range(args.calls):
        sem.acquire()
        fut = stub.Unary.future(pb.EchoRequest(payload=b"bonjour %d" % i, key="user-%d" % (i % 17)),
                                metadata=[("x-demo-call", str(i))], timeout=args.timeout)
        fut.add_done_callback(finished)
    done.wait(args.timeout * 2 + 10)
    channel.close()

    total = sum(served.values())
    print()
    print("%d calls through maitred at %s (%d in flight at a time)" % (args.calls, args.target, args.concurrency))
    print()
    print("  %-12s %7s %7s  %s" % ("instance", "calls", "share", ""))
    print("  %-12s %7s %7s  %s" % ("-" * 12, "-" * 7, "-" * 7, "-" * 30))
    for name in sorted(served):
        n = served[name]
        share = n / args.calls
        print("  %-12s %7d %6.1f%%  %s" % (name, n, share * 100, "#" * int(round(share * 30))))
    for err, n in sorted(errors.items()):
        print("  %-12s %7d %6.1f%%  %s" % ("FAILED", n, n * 100.0 / args.calls, err))
    print()
    if total != args.calls:
        print("%d of %d calls failed" % (args.calls - total, args.calls))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
