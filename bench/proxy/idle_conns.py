#!/usr/bin/env python3
"""Open N idle HTTP/2 (h2c, prior knowledge) client connections to a proxy.

Each connection sends the preface and SETTINGS, makes one gRPC-shaped unary
call (so the proxy has set up whatever a real app's channel would make it set
up), reads the response up to its trailers, acknowledges the server's
SETTINGS, and then stays open doing nothing. When all are ready the script
prints "ready ok=N fail=F" on stdout and holds the connections until its
standard input closes.

With --pids P1,P2,... (the proxy's processes) it also measures what the
connections cost the proxy in private memory: /proc/PID/smaps_rollup's
Anonymous and Private_Dirty, summed over those processes, before the first
connection and once all are open and settled, and appends to the ready line
"anon_kb=BEFORE:AFTER pd_kb=BEFORE:AFTER rss_kb=BEFORE:AFTER" (run.sh
divides the Anonymous growth by ok). The second measure is taken --settle
seconds (default 3) after the last connection is ready. Anonymous is what a node pays for the
process: memory no other process shares and that only swap could reclaim.
Shared library pages (in RSS, not in Anonymous) are paid once per node.

Standard library only; the HTTP/2 frames and the HPACK block (literal
header fields without indexing, no Huffman: RFC 7541 §6.2.2) are written by
hand.
"""
import socket
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    # Literal without indexing, new name; lengths stay below 127 here.
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def request(authority, path, body):
    block = b"\x83\x86"  # :method POST, :scheme http (static table 3, 6)
    block += hpack_literal(":path", path)
    block += hpack_literal(":authority", authority)
    block += hpack_literal("content-type", "application/grpc")
    block += hpack_literal("te", "trailers")
    return frame(HEADERS, END_HEADERS, 1, block) + \
        frame(DATA, END_STREAM, 1, body)


def one_call(host, port, req, timeout):
    s = socket.create_connection((host, port), timeout=timeout)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0) + req)
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[0:3], "big")
            if len(buf) < 9 + length:
                break
            ftype, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload = buf[9:9 + length]
            buf = buf[9 + length:]
            if ftype == SETTINGS and not flags & ACK:
                s.sendall(frame(SETTINGS, ACK, 0))
            elif ftype == PING and not flags & ACK:
                s.sendall(frame(PING, ACK, 0, payload))
            elif ftype == GOAWAY:
                raise OSError("GOAWAY")
            elif ftype == RST_STREAM and stream == 1:
                raise OSError("RST_STREAM")
            elif ftype in (HEADERS, DATA) and stream == 1 and \
                    flags & END_STREAM:
                s.settimeout(None)
                return s
    raise OSError("timeout")


ROLLUP_FIELDS = ("Anonymous", "Private_Dirty", "Rss")


def rollup_kb(pids):
    """Anonymous, Private_Dirty and Rss (KiB) summed over pids."""
    tot = dict.fromkeys(ROLLUP_FIELDS, 0)
    for pid in pids:
        try:
            with open("/proc/%s/smaps_rollup" % pid) as f:
                for line in f:
                    k, _, rest = line.partition(":")
                    if k in tot:
                        tot[k] += int(rest.split()[0])
        except OSError:
            pass  # a process that left (or was never there) costs nothing
    return tot


def main():
    args = sys.argv[1:]
    pids = []
    settle = 3.0
    while len(args) > 4 and args[-2] in ("--pids", "--settle"):
        if args[-2] == "--pids":
            pids = [p for p in args[-1].split(",") if p]
        else:
            settle = float(args[-1])
        args = args[:-2]
    if len(args) != 4:
        sys.exit("usage: idle_conns.py HOST PORT N BODY_FILE [--pids P1,P2,...] [--settle S]")
    host, port, n = args[0], int(args[1]), int(args[2])
    with open(args[3], "rb") as f:
        body = f.read()
    req = request("%s:%d" % (host, port), "/bench.Echo/Call", body)
    before = rollup_kb(pids) if pids else None
    conns, fail = [], 0
    for _ in range(n):
        try:
            conns.append(one_call(host, port, req, 5.0))
        except OSError as e:
            fail += 1
            if fail == 1:
                print("idle_conns: %s" % e, file=sys.stderr)
    line = "ready ok=%d fail=%d" % (len(conns), fail)
    if pids:
        # Idle means idle for a while: a proxy may give memory back once a
        # connection has been quiet for a second or so (maitred does).
        time.sleep(settle)
        after = rollup_kb(pids)
        line += " anon_kb=%d:%d pd_kb=%d:%d rss_kb=%d:%d" % (
            before["Anonymous"], after["Anonymous"],
            before["Private_Dirty"], after["Private_Dirty"],
            before["Rss"], after["Rss"])
    print(line, flush=True)
    sys.stdin.read()
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
