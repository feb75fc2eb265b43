#!/usr/bin/env python3
"""Open N idle HTTP/2 (h2c, prior knowledge) client connections to a proxy.

Each connection sends the preface and SETTINGS, makes one gRPC-shaped unary
call (so the proxy has set up whatever a real app's channel would make it set
up), reads the response up to its trailers, acknowledges the server's
SETTINGS, and then stays open doing nothing. When all are ready the script
prints "ready ok=N fail=F" on stdout and holds the connections until its
standard input closes (run.sh measures the proxy's RSS in between).

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


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: idle_conns.py HOST PORT N BODY_FILE")
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(sys.argv[4], "rb") as f:
        body = f.read()
    req = request("%s:%d" % (host, port), "/bench.Echo/Call", body)
    conns, fail = [], 0
    for _ in range(n):
        try:
            conns.append(one_call(host, port, req, 5.0))
        except OSError as e:
            fail += 1
            if fail == 1:
                print("idle_conns: %s" % e, file=sys.stderr)
    print("ready ok=%d fail=%d" % (len(conns), fail), flush=True)
    sys.stdin.read()
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
