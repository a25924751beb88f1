"""config_util.py - helpers for the tests of `idem serve --config FILE`
(tests/e2e/test_config_*.py): write a YAML file, start a gateway on it,
read a Prometheus counter."""

import os
import re

from harness import GatewayTestCase


class ConfigTestCase(GatewayTestCase):
    def write_config(self, text, name="idem.yaml"):
        """Write text (str, or bytes as they are) to a file in a temp dir
        of this test; its path."""
        path = os.path.join(self.tempdir(), name)
        with open(path, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        return path

    def start_config_gateway(self, text, *args, admin=False, **kw):
        """A gateway on a config file holding text (its flags: --listen,
        --upstream, --store and --spool from the harness, and args)."""
        up = self.start_upstream()
        path = self.write_config(text)
        gw = self.start_gateway(up, "--config", path, *args, admin=admin, **kw)
        return up, gw, path


def counter(metrics_text, name, labels):
    """The value of counter name{labels} in Prometheus text, or None."""
    m = re.search(r"^%s\{%s\} (\d+)$" % (re.escape(name), re.escape(labels)), metrics_text, re.M)
    return int(m.group(1)) if m else None
