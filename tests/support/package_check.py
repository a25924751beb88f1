#!/usr/bin/env python3
"""package_check.py SOURCE_DIR - the Debian package, built and taken apart:
scripts/package.sh builds idem_VERSION_ARCH.deb in a temporary directory;
its control file (Depends from dpkg-shlibdeps, the conffile) and contents
(binary, library, header, pkg-config file, a man page per command, the
example config, the systemd unit) are checked; the unpacked binary serves
the example /etc/idem/idem.yaml in front of a test upstream (its route
taking the key from the body replays, SIGHUP reloads, SIGTERM exits 0);
and the unit passes `systemd-analyze verify` where that command exists."""
import glob
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
from harness import free_port, wait_for  # noqa: E402
from upstream import Upstream  # noqa: E402


def sh(*args, **kw):
    return subprocess.run(args, capture_output=True, text=True, check=True, **kw).stdout


def check(cond, what):
    if not cond:
        sys.exit("package check: FAILED: " + what)
    print("ok  " + what)


def build(tmp):
    deb = sh(os.path.join(SRC, "scripts", "package.sh"), os.path.join(tmp, "build-deb"),
             cwd=SRC).strip().splitlines()[-1]
    version = re.search(r"project\(idem VERSION ([0-9.]+)",
                        open(os.path.join(SRC, "CMakeLists.txt")).read()).group(1)
    arch = sh("dpkg", "--print-architecture").strip()
    check(os.path.basename(deb) == "idem_%s_%s.deb" % (version, arch), "named " + os.path.basename(deb))
    return deb


def check_control(deb):
    control = sh("dpkg-deb", "-f", deb)
    depends = re.search(r"^Depends: (.*)$", control, re.M).group(1)
    for lib in ("libuv1", "liblmdb0", "libssl3", "libc6"):
        check(lib in depends, "Depends names " + lib)
    with tempfile.TemporaryDirectory() as ctl:
        sh("dpkg-deb", "-e", deb, ctl)
        check(open(os.path.join(ctl, "conffiles")).read().split() == ["/etc/idem/idem.yaml"],
              "/etc/idem/idem.yaml is a conffile")


def check_files(root):
    idem = os.path.join(root, "usr/bin/idem")
    for path in ["usr/bin/idem", "usr/include/idem/idem.h", "etc/idem/idem.yaml",
                 "usr/lib/systemd/system/idem.service"]:
        check(os.path.exists(os.path.join(root, path)), path)
    for pattern in ["usr/lib/*/libidem.so.0", "usr/lib/*/libidem.a", "usr/lib/*/pkgconfig/idem.pc"]:
        check(glob.glob(os.path.join(root, pattern)), pattern)
    commands = re.findall(r"^  ([a-z]+) ", sh(idem, "--help").split("commands:")[1], re.M)
    pages = ["idem"] + ["idem-" + c for c in commands if c != "version"]
    for page in pages:
        path = os.path.join(root, "usr/share/man/man1", page + ".1.gz")
        text = sh("zcat", path) if os.path.exists(path) else ""
        check(text.startswith(".TH %s 1" % page.upper()), "man page %s(1)" % page)
    return idem


def post(port, target, body, test_id):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", target, body=body,
              headers={"Content-Type": "application/json", "X-Test-Id": test_id})
    r = c.getresponse()
    out = (r.status, r.read(), r.getheader("Idempotent-Replayed"))
    c.close()
    return out


def check_serve(idem, root, tmp):
    conf = os.path.join(root, "etc/idem/idem.yaml")
    out = subprocess.run([idem, "config", "check", conf], capture_output=True, text=True)
    check(out.returncode == 0 and "ok" in out.stdout, "idem config check " + conf)
    up = Upstream().start()
    port, admin = free_port(), free_port()
    log = os.path.join(tmp, "serve.log")
    # the example file as it ships; flags put its listeners and store here
    proc = subprocess.Popen([idem, "serve", "--config", conf, "--listen", "127.0.0.1:%d" % port,
                             "--admin-listen", "127.0.0.1:%d" % admin, "--upstream", up.url,
                             "--store", "lmdb:%s/data" % tmp, "--spool", "%s/spool" % tmp],
                            stderr=open(log, "w"))
    try:
        def ready():
            try:
                c = http.client.HTTPConnection("127.0.0.1", admin, timeout=2)
                c.request("GET", "/healthz")
                return c.getresponse().status == 200
            except OSError:
                return False
        wait_for(ready, 20, what="the unpacked idem serving")
        body = json.dumps({"order_id": "o-17", "sku": "tea"}).encode()
        first, second = post(port, "/v1/orders", body, "o-17"), post(port, "/v1/orders", body, "o-17")
        check(first[0] == 200 and second[1] == first[1] and second[2] == "true"
              and up.count("o-17") == 1,
              "the example's /v1/orders route keys on json:/order_id: the retry replays")
        proc.send_signal(signal.SIGHUP)
        # SIGTERM only once the reload is logged: sent at once, it can win
        wait_for(lambda: "reloaded" in open(log).read(), 20, what="SIGHUP reloads the example file")
        check(True, "SIGHUP reloads the example file")
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(30) == 0, "SIGHUP, then SIGTERM: exit 0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        up.stop()


def check_unit(root, tmp):
    if not shutil.which("systemd-analyze"):
        print("skip systemd-analyze verify: not on this machine")
        return
    unit = open(os.path.join(root, "usr/lib/systemd/system/idem.service")).read()
    for key in ("DynamicUser=yes", "StateDirectory=idem", "LogsDirectory=idem",
                "ExecReload=/bin/kill -HUP $MAINPID"):
        check(key in unit, "idem.service has " + key)
    # verify checks that ExecStart exists: point it at the unpacked binary
    path = os.path.join(tmp, "idem.service")
    with open(path, "w") as f:
        f.write(unit.replace("/usr/bin/idem", os.path.join(root, "usr/bin/idem")))
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", path],
                         capture_output=True, text=True)
    check(out.returncode == 0, "systemd-analyze verify idem.service " + out.stderr.strip())


def main():
    tmp = tempfile.mkdtemp(prefix="idem-package.")
    try:
        deb = build(tmp)
        check_control(deb)
        root = os.path.join(tmp, "root")
        sh("dpkg-deb", "-x", deb, root)
        idem = check_files(root)
        check_serve(idem, root, tmp)
        check_unit(root, tmp)
        print("package check: passed")
    finally:
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
