#!/usr/bin/env python3
"""Malformed traffic on a gpubpf agent's control socket (docs/agent-protocol.md).

    agent_fuzz.py fuzz PID      garbage, truncated, oversized, out-of-order and
                                fd-carrying messages, many connections; then a
                                normal hello on a new connection must work
    agent_fuzz.py refused PID   this user must be refused (run it as another uid)
    agent_fuzz.py hello PID     one normal hello

The socket is $GPUBPF_AGENT_SOCKET_DIR/PID.sock (default /run/gpubpf), else
the abstract socket @gpubpf/PID. Prints "ok NAME: ..." or "FAIL NAME: ..."
per case and last "FUZZ: N ok, M failed" (fuzz), "REFUSED: ..." or
"NOT REFUSED: ..." (refused), "HELLO ok ..." (hello); exits 1 on a failure.
Only malformed requests are sent: nothing here is a well-formed request that
could touch the application's memory. Used by scripts/gpu/faults-check.sh
(cases 9 and 10) and by pkg/runtime/agentclient's fault tests.
"""
import array
import errno
import os
import random
import socket
import struct
import sys
import time

PROTO_MAX_FRAME = 64 << 20
OP_HELLO, OP_LIST = 1, 2
UNKNOWN_OP = 0x7777
TIMEOUT = 10.0


class Closed(Exception):
    """The agent closed the connection."""


def sock_path(pid):
    d = os.environ.get("GPUBPF_AGENT_SOCKET_DIR") or "/run/gpubpf"
    return os.path.join(d, "%d.sock" % pid)


def connect(pid):
    """A connection to the agent of pid: its socket file, else (no such file)
    the abstract fallback name. Other errors (EACCES...) are raised."""
    deadline = time.monotonic() + TIMEOUT
    addrs = [sock_path(pid), "\0gpubpf/%d" % pid]
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        try:
            s.connect(addrs[0])
            return s
        except FileNotFoundError:
            s.close()
            if len(addrs) == 1:
                raise
            addrs.pop(0)  # no socket file: the agent's fallback
        except BlockingIOError:
            # the listen backlog is full (a socket with a timeout does not
            # wait for room): the agent is still accepting, try again
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
        except OSError:
            s.close()
            raise


def frame(op, payload=b"", req=1, length=None):
    n = len(payload) if length is None else length
    return struct.pack("<IHHI", n, op, 0, req) + payload


def sstr(b):
    return struct.pack("<I", len(b)) + b


def hello_payload(client=b"agent_fuzz"):
    return struct.pack("<II", 4, 0) + sstr(client)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        try:
            k = s.recv(n - len(b))
        except ConnectionResetError:
            raise Closed()
        if not k:
            raise Closed()
        b += k
    return b


def read_frame(s):
    h = recv_exact(s, 12)
    n, op, _, req = struct.unpack("<IHHI", h)
    return op, req, recv_exact(s, n) if n else b""


def read_reply(s, op, req):
    """The reply to (op, req), skipping notifications: (status, body after it)."""
    while True:
        rop, rreq, p = read_frame(s)
        if rreq == req and rop == op:
            if len(p) < 4:
                raise ValueError("reply to op %d shorter than its status" % op)
            return struct.unpack("<i", p[:4])[0], p[4:]
        if rreq != 0:
            raise ValueError("unexpected frame op %d req %d while waiting for op %d req %d" % (rop, rreq, op, req))


def error_message(body):
    if len(body) < 8:
        return ""
    (k,) = struct.unpack("<I", body[4:8])
    return body[8 : 8 + k].decode("utf-8", "replace")


def request(s, op, payload, req):
    s.sendall(frame(op, payload, req))
    return read_reply(s, op, req)


def no_second_reply(s, op, req):
    """After a reply, the agent must not answer the same request again:
    sends a list (request id req + 1) and expects its reply to come next."""
    s.sendall(frame(OP_LIST, b"\x01\x00\x00\x00", req + 1))
    while True:
        rop, rreq, p = read_frame(s)
        if rreq == 0:
            continue
        if rreq == req:
            raise ValueError("a second reply (%d bytes) to op %d request %d" % (len(p), op, req))
        if rreq == req + 1 and rop == OP_LIST:
            return
        raise ValueError("unexpected frame op %d req %d" % (rop, rreq))


def hello(s, req=1):
    st, body = request(s, OP_HELLO, hello_payload(), req)
    if st != 0:
        raise ValueError("hello refused: status %d %s" % (st, error_message(body)))
    ver, pid, uid = struct.unpack("<III", body[:12])
    off = 12
    (k,) = struct.unpack("<I", body[off : off + 4])
    off += 4 + k
    (k,) = struct.unpack("<I", body[off : off + 4])
    agent = body[off + 4 : off + 4 + k].decode()
    off += 4 + k
    drv, isa, ready = struct.unpack("<iII", body[off : off + 12])
    return {"version": ver, "pid": pid, "uid": uid, "agent": agent, "driver": drv, "cuda_ready": bool(ready)}


def until_closed(s, limit=TIMEOUT):
    """Reads until the agent closes; returns the bytes it sent."""
    got = b""
    s.settimeout(limit)
    try:
        while True:
            k = s.recv(65536)
            if not k:
                return got
            got += k
    except ConnectionResetError:
        return got


def send_then_close(pid, data, shutdown=True):
    s = connect(pid)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return "closed by the agent while sending"
        if shutdown:
            s.shutdown(socket.SHUT_WR)
        got = until_closed(s)
        return "closed by the agent after %d reply bytes" % len(got)
    finally:
        s.close()


def send_fds(s, data, fds):
    s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


CASES = []


def case(f):
    CASES.append(f)
    return f


RNG = random.Random(13)


@case
def random_bytes(pid):
    return send_then_close(pid, bytes(RNG.getrandbits(8) for _ in range(65536)))


@case
def http_text(pid):
    # "GET " read as a length is 542 MB: over the limit
    return send_then_close(pid, b"GET / HTTP/1.0\r\nHost: gpubpf\r\n\r\n", shutdown=False)


@case
def short_header(pid):
    return send_then_close(pid, frame(OP_HELLO, hello_payload())[:5])


@case
def short_payload(pid):
    return send_then_close(pid, frame(OP_HELLO, b"\x04\x00\x00\x00\x00\x00", length=1000))


@case
def oversized_length(pid):
    # over the limit: the agent must close by itself, without reading on
    s = connect(pid)
    try:
        s.sendall(frame(OP_HELLO, b"", length=PROTO_MAX_FRAME + 1))
        got = until_closed(s)
        if got:
            raise ValueError("the agent answered %d bytes to a frame of 64 MiB + 1" % len(got))
        return "closed by the agent, nothing answered"
    finally:
        s.close()


@case
def max_length(pid):
    s = connect(pid)
    try:
        s.sendall(frame(OP_HELLO, b"", length=0xFFFFFFFF))
        got = until_closed(s)
        return "closed by the agent after %d bytes" % len(got)
    finally:
        s.close()


@case
def before_hello(pid):
    s = connect(pid)
    try:
        st, body = request(s, OP_LIST, b"\x01\x00\x00\x00", 7)
        if st != 1 or "hello" not in error_message(body):
            raise ValueError("list before hello: status %d %r" % (st, error_message(body)))
        h = hello(s, 8)
        return "refused with %r, then hello ok on the same connection (pid %d)" % (error_message(body), h["pid"])
    finally:
        s.close()


@case
def unknown_ops(pid):
    s = connect(pid)
    try:
        hello(s)
        seen = []
        for i, op in enumerate((0, UNKNOWN_OP, 0x40, 0x41, 0x42, 0x43, 0xFFFF)):
            st, body = request(s, op, b"\xAA" * 16, 100 + 2 * i)
            if st != 4:
                raise ValueError("op %#x: status %d %r, want 4 (unsupported)" % (op, st, error_message(body)))
            no_second_reply(s, op, 100 + 2 * i)
            seen.append(op)
        return "%d unknown ops answered status 4" % len(seen)
    finally:
        s.close()


@case
def request_id_zero(pid):
    s = connect(pid)
    try:
        hello(s)
        s.sendall(frame(OP_LIST, b"\x01\x00\x00\x00", req=0))
        while True:
            op, req, p = read_frame(s)
            if op == OP_LIST and req == 0:
                break
        st = struct.unpack("<i", p[:4])[0]
        if st != 0:
            raise ValueError("list with request id 0: status %d" % st)
        return "answered with request id 0"
    finally:
        s.close()


@case
def truncated_requests(pid):
    # payloads shorter than every op's fixed fields: each must be answered
    # (an error, or OK for ops that read nothing harmful), never acted on
    s = connect(pid)
    try:
        hello(s)
        n, errors = 0, 0
        req = 1000
        for op in range(2, 24):
            for k in (0, 1, 3, 7, 11):
                req += 2
                st, _ = request(s, op, b"\xff" * k, req)
                if not 0 <= st <= 5:
                    raise ValueError("op %d with %d bytes: status %d" % (op, k, st))
                no_second_reply(s, op, req)
                n += 1
                errors += st != 0
        return "%d requests answered (%d with an error status)" % (n, errors)
    finally:
        s.close()


@case
def truncated_after_target(pid):
    # a valid target (device 0, primary context) and then too little:
    # the agent makes the context current and must still refuse
    s = connect(pid)
    try:
        hello(s)
        target = struct.pack("<iQ", 0, 0)
        out = []
        for i, op in enumerate((5, 7, 8, 9, 10, 11, 12, 14, 22, 23)):
            extra = b"\xff\xff\xff\xff" if op == 5 else b"\x01\x02\x03"
            st, body = request(s, op, target + extra, 2000 + 2 * i)
            if st == 0:
                raise ValueError("op %d with a truncated request answered OK" % op)
            no_second_reply(s, op, 2000 + 2 * i)
            out.append(st)
        st, body = request(s, 4, struct.pack("<QiQI", 1, 0, 0, 65536), 2100)
        if st == 0:
            raise ValueError("globals with 65536 names and none sent answered OK")
        return "refused: statuses %s; globals %d" % (out, st)
    finally:
        s.close()


@case
def largest_frame(pid):
    s = connect(pid)
    try:
        hello(s)
        st, body = request(s, UNKNOWN_OP, bytes(PROTO_MAX_FRAME), 3000)
        if st != 4:
            raise ValueError("64 MiB frame of an unknown op: status %d" % st)
        no_second_reply(s, UNKNOWN_OP, 3000)
        h = hello(s, 3002)
        return "64 MiB frame answered status 4; hello again ok (pid %d)" % h["pid"]
    finally:
        s.close()


@case
def passed_fds(pid):
    s = connect(pid)
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(4)]
    try:
        hello(s)
        for i in range(10):
            send_fds(s, frame(UNKNOWN_OP, b"x", 4000 + 2 * i), fds[: 1 + i % 4])
            st, _ = read_reply(s, UNKNOWN_OP, 4000 + 2 * i)
            if st != 4:
                raise ValueError("unknown op with fds: status %d" % st)
            no_second_reply(s, UNKNOWN_OP, 4000 + 2 * i)
        # a register-host request without its fd, after the stray ones:
        # it must not pick up an fd that came with another request
        st, body = request(s, 12, struct.pack("<iQIQQ", 0, 0, 1, 4096, 0), 4100)
        msg = error_message(body)
        if st == 4 and "not initialised CUDA" in msg:
            return "10 frames with 1-4 fds answered; register-host not checked: %r" % msg
        if st != 1 or "no file descriptor" not in msg:
            raise ValueError("register-host without an fd, after frames that carried some: status %d %r "
                             "(want 1, no file descriptor came with the request)" % (st, msg))
        return "10 frames with 1-4 fds answered; register-host without one refused: %r" % msg
    finally:
        for fd in fds:
            os.close(fd)
        s.close()


@case
def garbage_after_hello(pid):
    s = connect(pid)
    try:
        hello(s)
        try:
            s.sendall(bytes(RNG.getrandbits(8) for _ in range(1 << 20)))
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return "closed by the agent while sending"
        got = until_closed(s)
        return "closed by the agent after %d bytes" % len(got)
    finally:
        s.close()


@case
def byte_by_byte(pid):
    s = connect(pid)
    try:
        data = frame(OP_HELLO, hello_payload(), 5000)
        for i in range(len(data)):
            s.sendall(data[i : i + 1])
            time.sleep(0.005)
        st, _ = read_reply(s, OP_HELLO, 5000)
        if st != 0:
            raise ValueError("hello sent a byte at a time: status %d" % st)
        return "hello sent a byte at a time answered"
    finally:
        s.close()


@case
def many_connections(pid):
    conns = []
    try:
        for _ in range(100):
            conns.append(connect(pid))
        h = hello(conns[-1])
        return "100 connections open at once; hello on the last ok (pid %d)" % h["pid"]
    finally:
        for c in conns:
            c.close()


@case
def hello_and_vanish(pid):
    for _ in range(20):
        s = connect(pid)
        s.sendall(frame(OP_HELLO, hello_payload()))
        s.close()
    return "20 connections closed right after hello"


@case
def half_close(pid):
    s = connect(pid)
    try:
        hello(s)
        s.shutdown(socket.SHUT_WR)
        got = until_closed(s)
        return "the agent closed after our EOF (%d notification bytes)" % len(got)
    finally:
        s.close()


def fuzz(pid):
    ok = failed = 0
    for c in CASES:
        name = c.__name__.replace("_", "-")
        t0 = time.monotonic()
        try:
            what = c(pid)
            print("ok   %s: %s (%.2f s)" % (name, what, time.monotonic() - t0), flush=True)
            ok += 1
        except (Closed, OSError, ValueError, struct.error) as e:
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
            failed += 1
    time.sleep(0.2)
    try:
        s = connect(pid)
        h = hello(s)
        s.close()
        if h["pid"] != pid:
            raise ValueError("hello says pid %d" % h["pid"])
        print("ok   final-hello: agent %s, protocol %d, pid %d, cuda_ready %s" % (h["agent"], h["version"], h["pid"], h["cuda_ready"]))
        ok += 1
    except Exception as e:  # noqa: BLE001 - any failure here is the verdict
        print("FAIL final-hello: %s: %s" % (type(e).__name__, e))
        failed += 1
    print("FUZZ: %d ok, %d failed" % (ok, failed))
    return 1 if failed else 0


def refused(pid):
    try:
        s = connect(pid)
    except OSError as e:
        print("REFUSED: connect failed: %s (%s)" % (errno.errorcode.get(e.errno, e.errno), e.strerror))
        return 0
    try:
        try:
            s.sendall(frame(OP_HELLO, hello_payload()))
        except (BrokenPipeError, ConnectionResetError):
            print("REFUSED: the agent closed the connection before hello")
            return 0
        try:
            got = until_closed(s, 5.0)
        except socket.timeout:
            print("NOT REFUSED: no answer and no close within 5 s")
            return 1
        if got:
            print("NOT REFUSED: the agent answered hello (%d bytes) to uid %d" % (len(got), os.getuid()))
            return 1
        print("REFUSED: the agent closed the connection without answering (uid %d)" % os.getuid())
        return 0
    finally:
        s.close()


def main(argv):
    if len(argv) != 3 or argv[1] not in ("fuzz", "refused", "hello"):
        sys.stderr.write(__doc__)
        return 2
    pid = int(argv[2])
    if argv[1] == "fuzz":
        return fuzz(pid)
    if argv[1] == "refused":
        return refused(pid)
    s = connect(pid)
    h = hello(s)
    s.close()
    print("HELLO ok pid=%d uid=%d agent=%s driver=%d cuda_ready=%s" % (h["pid"], h["uid"], h["agent"], h["driver"], h["cuda_ready"]))
    return 0 if h["pid"] == pid else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
