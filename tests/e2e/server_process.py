"""server_process.py - what the throwaway servers of the e2e tests share
(redis_server.py, nats_server.py, rabbitmq_server.py): a temp dir, a free
127.0.0.1 port, a process in a session of its own, and its life:

    alive()      still running
    kill()       SIGKILL, as a crash or an OOM kill would (and reap it)
    stop()       SIGTERM, wait, then SIGKILL
    cleanup()    stop, and remove the dir (kept with IDEM_E2E_KEEP=1)
    log()        the tail of the server's log file

A subclass says its name, and starts its process with spawn(argv) and
wait_ready(probe) (probe: True once the server answers; OSError and the
errors in PROBE_ERRORS mean "not yet").
"""

import os
import shutil
import signal
import subprocess
import tempfile

from harness import free_port, terminate, wait_for


class ServerProcess:
    name = "server"
    PROBE_ERRORS = (OSError, RuntimeError, TimeoutError)

    def __init__(self, port=None):
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="idem-%s-" % self.name)
        self.proc = None
        self._log = os.path.join(self.dir, "%s.log" % self.name)

    def spawn(self, argv, env=None):
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def wait_ready(self, probe, timeout, interval=0.05):
        """Until probe() is true; the server dying or the timeout raise, with its log."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %d:\n%s" % (self.name, self.proc.returncode, self.log()))
            try:
                return probe()
            except self.PROBE_ERRORS:
                return False

        try:
            wait_for(ready, timeout, interval=interval, what=self.name)
        except TimeoutError:
            self.kill()
            raise RuntimeError("%s not ready after %.0fs:\n%s" % (self.name, timeout, self.log())) from None
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self, timeout=10.0):
        if self.alive():
            terminate(self.proc, timeout)

    def cleanup(self):
        self.stop()
        if not os.environ.get("IDEM_E2E_KEEP"):
            shutil.rmtree(self.dir, True)

    def log(self):
        try:
            with open(self._log, "rb") as f:
                return f.read().decode("utf-8", "replace")[-3000:]
        except OSError:
            return ""
