#!/usr/bin/env python3
"""run_check.py SOURCE_DIR - the README's first command, as a newcomer runs it:
scripts/run.sh in a copy of the tree (the files git knows, so the build is
fresh), then the README's walk-through against it: the same request twice
gives one order and a replay, another body under the key is 422, the example
API counts one order; SIGTERM to the script stops the gateway and the API,
and the script exits 0. Run again with another program on 8080, it exits 1
and starts no gateway in front of that program. Last, the README's "By hand"
block, pasted whole, prints order 1 with fence 1, a replay and a 422. Its
fixed ports (8080 to 8082) must be free: when one is in use it exits 77,
which ctest reports as skipped."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
from harness import wait_for  # noqa: E402

PORTS = {"upstream": 8080, "gateway": 8081, "admin": 8082}


def check(cond, what):
    if not cond:
        sys.exit("run check: FAILED: " + what)
    print("ok  " + what)


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def copy_tree(dest):
    listed = subprocess.run(["git", "-C", SRC, "ls-files", "-z"], capture_output=True)
    if listed.returncode != 0:  # not a clone: everything but builds and records
        shutil.rmtree(dest)
        shutil.copytree(SRC, dest, symlinks=True, ignore=shutil.ignore_patterns(
            "build*", ".git", "idem-data"))
        return
    files = listed.stdout.split(b"\0")
    for f in filter(None, files):
        src, dst = os.path.join(SRC.encode(), f), os.path.join(dest.encode(), f)
        if os.path.lexists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)


def post(body, key="order-7"):
    c = http.client.HTTPConnection("127.0.0.1", PORTS["gateway"], timeout=10)
    c.request("POST", "/orders", body=body, headers={"Idempotency-Key": key})
    r = c.getresponse()
    out = (r.status, r.read(), r.getheader("Idempotent-Replayed"))
    c.close()
    return out


def orders_created():
    c = http.client.HTTPConnection("127.0.0.1", PORTS["upstream"], timeout=10)
    c.request("GET", "/")
    n = json.loads(c.getresponse().read())["orders_created"]
    c.close()
    return n


def walk_through(proc):
    # the build comes first: minutes on two cores
    wait_for(lambda: proc.poll() is not None or port_open(PORTS["gateway"]), timeout=900,
             interval=0.2, what="the gateway to listen")
    check(proc.poll() is None, "run.sh built and started the gateway on 127.0.0.1:8081")
    check(port_open(PORTS["admin"]), "its admin listener answers on 127.0.0.1:8082")
    first, second = post(b'{"sku":"tea"}'), post(b'{"sku":"tea"}')
    check(first[0] == 201 and first[2] is None, "the first request ran: %r" % (first,))
    check(second[0] == 201 and second[1] == first[1] and second[2] == "true",
          "the retry got the same order id, marked Idempotent-Replayed: true")
    check(post(b'{"sku":"coffee"}')[0] == 422, "another body under the key: 422")
    check(orders_created() == 1, "the orders API saw one request")


def foreign_upstream(tmp):
    """Another program on 8080: run.sh must not put the gateway in front of it."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", PORTS["upstream"]))
        other.listen(16)
        run = subprocess.Popen([os.path.join(tmp, "scripts", "run.sh")], cwd=tmp,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
        try:  # the build is done already: it has nothing to wait for
            err = run.communicate(timeout=300)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            err = "still running after 300 s"
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        check(run.returncode == 1 and "8080 is in use" in err,
              "another program on 8080: run.sh exits 1 and says so (%d: %s)"
              % (run.returncode, err[-300:]))
        check(not port_open(PORTS["gateway"]), "and no gateway is left listening on 8081")


def by_hand_block():
    """The sh block under the README's "By hand", as a reader pastes it."""
    text = open(os.path.join(SRC, "README.md")).read()
    section = text.split("### By hand", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def by_hand(tmp):
    """The README's "By hand" block, pasted whole: the first curl prints the
    order with fence 1 (no 502 from a gateway started before its API)."""
    shutil.rmtree(os.path.join(tmp, "idem-data"), ignore_errors=True)
    log = os.path.join(tmp, "by-hand.log")  # not a pipe: what it starts keeps it open
    with open(log, "wb") as f:
        proc = subprocess.Popen(["bash", "-c", by_hand_block()], cwd=tmp, stdout=f,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=60)
        out = open(log, errors="replace").read()
    finally:  # the API and the gateway it started in the background
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait()
    wait_for(lambda: not any(port_open(p) for p in PORTS.values()), timeout=30,
             what="ports 8080 to 8082 to close")
    first = out.split("\n", 1)[0]
    check(first.startswith('{"order": 1,') and first.endswith('"fence": "1"}'),
          "the README's By hand block: the first request prints order 1, fence 1: %r"
          % out[:400])
    check("Idempotent-Replayed: true" in out and "422 Unprocessable" in out
          and '"key":"order-7f3a","state":"completed"' in out,
          "then a replay, a 422 and the record from the admin listener")


def main():
    busy = [p for p in PORTS.values() if port_open(p)]
    if busy:  # another program's ports: nothing this test can say (ctest: skipped)
        print("run check: skipped: ports %s are in use, and run.sh listens there" % busy)
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="idem-run-check.")
    proc = None
    try:
        copy_tree(tmp)
        log = open(os.path.join(tmp, "run.log"), "wb")
        proc = subprocess.Popen([os.path.join(tmp, "scripts", "run.sh")], cwd=tmp,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            walk_through(proc)
        except (SystemExit, Exception):
            print(open(os.path.join(tmp, "run.log"), errors="replace").read()[-4000:])
            raise
        check(os.path.isfile(os.path.join(tmp, "idem-data", "data.mdb")),
              "the records are in ./idem-data")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        check(rc == 0, "SIGTERM to run.sh: it exits 0 (got %d)" % rc)
        wait_for(lambda: not any(port_open(p) for p in PORTS.values()), timeout=30,
                 what="ports 8080 to 8082 to close")
        check(True, "the gateway and the example API are stopped")
        foreign_upstream(tmp)
        by_hand(tmp)
    finally:
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("run check: passed")


if __name__ == "__main__":
    main()
