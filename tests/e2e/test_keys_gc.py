"""idem keys get|delete|list and idem gc on an lmdb: store that a gateway
filled: JSON output that parses, exit codes (0 ok, 1 failed, 2 usage), clear
errors for a path that is not a store, and processes creating one store at
once. The store is read while the gateway still runs (LMDB is shared between
processes) and after it stopped."""

import json
import os
import subprocess

from harness import GatewayTestCase, idem_bin, main, run_idem, wait_for


class KeysAndGc(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()
        self.dir = self.tempdir()
        self.store = "lmdb:%s/store" % self.dir
        self.gw = self.start_gateway(self.up, "--scope-header", "X-Tenant", store=self.store)
        for i in range(5):
            r = self.gw.request("POST", "/k", body=b"%d" % i, key="key-%d" % i,
                                headers={"X-Test-Status": "201"})
            self.assertEqual(r.status, 201, self.gw_log())
        r = self.gw.request("POST", "/k", body=b"t", key="key-0", headers={"X-Tenant": "acme"})
        self.assertEqual(r.status, 200, self.gw_log())

    def keys(self, *args):
        return run_idem(["keys"] + list(args) + ["--store", self.store])

    def test_list_prints_one_json_record_per_line(self):
        code, out, err = self.keys("list")
        self.assertEqual(code, 0, err)
        recs = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(len(recs), 6, out)
        plain = [r for r in recs if r["scope"] == ""]
        self.assertEqual([r["key"] for r in plain], ["key-%d" % i for i in range(5)])
        self.assertEqual(len({r["scope"] for r in recs}), 2)
        for r in recs:
            self.assertEqual(r["state"], "completed")
            self.assertEqual(r["fence"], 1)
            self.assertIsInstance(r["created_at_ms"], int)
            self.assertTrue(r["expires_at"].endswith("Z"), r)
            self.assertGreater(r["expires_at_ms"], r["updated_at_ms"])
            self.assertIsNone(r["locked_until"])
        self.assertEqual(plain[0]["response"]["status"], 201)
        self.assertGreater(plain[0]["response"]["body_bytes"], 0)
        # paging within a scope: after a key, at most N
        code, out, err = self.keys("list", "key-1", "--scope", "", "--limit", "2")
        self.assertEqual(code, 0, err)
        self.assertEqual([json.loads(l)["key"] for l in out.splitlines()], ["key-2", "key-3"])

    def test_get_and_delete(self):
        code, out, err = self.keys("get", "key-2")
        self.assertEqual(code, 0, err)
        rec = json.loads(out)
        self.assertEqual((rec["key"], rec["state"], rec["response"]["status"]),
                         ("key-2", "completed", 201))
        code, out, err = self.keys("delete", "key-2")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out), {"scope": "", "key": "key-2", "deleted": 1})
        code, out, err = self.keys("get", "key-2")
        self.assertEqual(code, 1)
        self.assertIn("no such record", err)
        code, out, err = self.keys("delete", "key-2")
        self.assertEqual(code, 1)
        # the gateway sees the deletion: the key runs again
        r = self.gw.request("POST", "/k", body=b"2", key="key-2")
        self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("key-2"), 2)

    def test_gc_after_the_gateway_stopped(self):
        self.assertEqual(self.gw.stop(), 0, self.gw_log())
        code, out, err = run_idem(["gc", "--store", self.store])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out), {"deleted": 0})  # nothing has expired
        code, out, err = run_idem(["gc", "--store", self.store, "--limit", "5"])
        self.assertEqual(code, 0, err)

    def test_output_that_cannot_be_written_is_said(self):
        # exit 1, as for any failure, and the reason, not a silent 1
        for args in (["keys", "list"], ["keys", "get", "key-1"], ["gc"]):
            with open("/dev/full", "w") as full:
                p = subprocess.run([idem_bin()] + args + ["--store", self.store],
                                   stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE,
                                   timeout=30)
            self.assertEqual(p.returncode, 1, (args, p.stderr))
            self.assertIn(b"cannot write the output: No space left on device", p.stderr, args)

    def test_usage_errors_exit_2(self):
        for args in (["keys"], ["keys", "frob"], ["keys", "get"], ["keys", "get", "a b\x01"],
                     ["keys", "list", "--limit", "x"], ["keys", "list", "--store"],
                     ["keys", "get", "k", "--bogus"], ["gc", "--limit", "0"], ["gc", "extra"]):
            code, out, err = run_idem(args)
            self.assertEqual(code, 2, (args, out, err))
            self.assertIn("--help", err)
        code, out, err = run_idem(["keys", "--help"])
        self.assertEqual(code, 0)
        self.assertIn("idem keys list", out)

    def test_a_flag_is_never_the_value_of_the_flag_before_it(self):
        # "--scope --store X" must not list the scope named "--store"
        for args, flag in ((["keys", "list", "--scope", "--store", self.store], "--scope"),
                           (["gc", "--store", "--limit", "1"], "--store")):
            code, out, err = run_idem(args)
            self.assertEqual(code, 2, (args, out, err))
            self.assertIn("%s needs a value" % flag, err, args)
            self.assertEqual(out, "", args)

    def test_bad_stores_are_clear_errors(self):
        f = os.path.join(self.dir, "file")
        with open(f, "w") as fh:
            fh.write("not a store\n")
        code, out, err = run_idem(["keys", "list", "--store", "lmdb:" + f])
        self.assertEqual(code, 1)
        self.assertIn("not an idem store", err)
        code, out, err = run_idem(["gc", "--store", "lmdb:%s/a/b/c" % self.dir])
        self.assertEqual(code, 1)
        self.assertIn("no store at", err)
        # a malformed URI is a bad --store value: 2, as for serve
        code, out, err = run_idem(["keys", "list", "--store", self.store + "?colour=red"])
        self.assertEqual(code, 2)
        self.assertIn("unknown option 'colour'", err)
        self.assertIn("--store", err)
        code, out, err = run_idem(["gc", "--store", "foo:bar"])
        self.assertEqual(code, 2)
        self.assertIn("--store", err)
        code, out, err = run_idem(["keys", "list", "--store", "lmdb:"])
        self.assertEqual(code, 2)
        self.assertIn("--store 'lmdb:': lmdb: no directory given", err)
        # what libpq would refuse only when connecting is malformed too
        for uri in ("postgres://u@127.0.0.1:1/app%zz", "postgres://127.0.0.1:abc/db",
                    "postgres://127.0.0.1:1/db?sslmode=bogus", "postgres://127.0.0.1:1/db?bogus=1"):
            for cmd in (["keys", "list"], ["gc"], ["migrate", "--check"]):
                code, out, err = run_idem(cmd + ["--store", uri])
                self.assertEqual(code, 2, (cmd, uri, err))
                self.assertIn("--store", err, (cmd, uri))

    def test_rediss_is_refused_as_tls(self):
        # README: "Not supported: TLS (rediss:// is refused)": with the
        # reason, not as an unknown scheme
        for cmd in (["keys", "list", "--store"], ["gc", "--store"],
                    ["serve", "--upstream", self.up.url, "--listen", "127.0.0.1:0", "--store"],
                    ["serve", "--upstream", self.up.url, "--listen", "127.0.0.1:0",
                     "--store", "memory:", "--cache"]):
            code, out, err = run_idem(cmd + ["rediss://127.0.0.1:1"])
            if "no Redis support" in err:
                self.skipTest("a build without Redis")
            self.assertEqual(code, 2, (cmd, out, err))
            self.assertIn("rediss:// (TLS) is not supported", err, cmd)

    def test_gc_on_an_unreachable_network_store_fails(self):
        # Redis expires records itself, but gc must still say that the store
        # did not answer, on a cluster as on one server
        for uri in ("redis://127.0.0.1:1", "redis+cluster://127.0.0.1:1"):
            code, out, err = run_idem(["gc", "--store", uri])
            if "no Redis support" in err:
                self.skipTest("a build without Redis")
            self.assertEqual(code, 1, (uri, out, err))
            self.assertIn("IDEM_ESTORE", err, uri)

    def test_migrate_on_an_unreachable_network_store_fails(self):
        # README: exit 1 on a store error. Redis has no schema, but a Redis
        # that does not answer is not "nothing to migrate" with status 0
        for uri in ("redis://127.0.0.1:1", "redis+cluster://127.0.0.1:1"):
            for cmd in (["migrate"], ["migrate", "--check"]):
                code, out, err = run_idem(cmd + ["--store", uri])
                if "no Redis support" in err:
                    self.skipTest("a build without Redis")
                self.assertEqual(code, 1, (cmd, uri, out, err))
                self.assertIn("IDEM_ESTORE", err, (cmd, uri))
                self.assertNotIn("nothing to migrate", out, (cmd, uri))

    def test_a_path_without_a_store_is_not_created(self):
        # a mistyped path must be an error, not a new empty store
        missing = os.path.join(self.dir, "typo")
        for cmd in (["keys", "list"], ["keys", "get", "key-1"], ["gc"], ["migrate"],
                    ["migrate", "--check"]):
            code, out, err = run_idem(cmd + ["--store", "lmdb:" + missing])
            self.assertEqual(code, 1, (cmd, out, err))
            self.assertIn("no store at '%s' (no such directory)" % missing, err)
            self.assertFalse(os.path.exists(missing))
        # an option is read from the query only: a path may say anything
        odd = os.path.join(self.dir, "create=yes")
        code, out, err = run_idem(["keys", "list", "--store", "lmdb:" + odd])
        self.assertEqual(code, 1, err)
        self.assertFalse(os.path.exists(odd))
        empty = os.path.join(self.dir, "empty")
        os.mkdir(empty)
        code, out, err = run_idem(["keys", "list", "--store", "lmdb:" + empty])
        self.assertEqual(code, 1, err)
        self.assertIn("holds no data.mdb", err)
        self.assertEqual(os.listdir(empty), [])
        # the store the gateway made opens as before, with or without options
        code, out, err = run_idem(["keys", "get", "key-1", "--store", self.store + "?batch=1"])
        self.assertEqual(code, 0, err)
        code, out, err = run_idem(["migrate", "--check", "--store", self.store])
        self.assertEqual((code, out), (0, "lmdb stores have no schema: nothing to migrate\n"), err)
        # asking for it creates one
        code, out, err = run_idem(["keys", "list", "--store", "lmdb:%s?create=yes" % missing])
        self.assertEqual((code, out), (0, ""), err)
        self.assertTrue(os.path.exists(os.path.join(missing, "data.mdb")))
        code, out, err = run_idem(["keys", "list", "--store", "lmdb:%s?create=maybe" % missing])
        self.assertEqual(code, 2)  # a bad --store value
        self.assertIn("create 'maybe': want yes or no", err)

    def test_serve_with_create_no_refuses_a_missing_store(self):
        missing = os.path.join(self.dir, "typo")
        code, out, err = run_idem(["serve", "--listen", "127.0.0.1:0", "--upstream",
                                   self.up.url,
                                   "--store", "lmdb:%s?create=no" % missing])
        self.assertNotEqual(code, 0)
        self.assertIn("no store at", err)
        self.assertFalse(os.path.exists(missing))


class FreshStore(GatewayTestCase):
    def test_processes_that_create_one_store_at_once_all_open_it(self):
        # several processes (the gateways of a deploy, a gc) starting at once on
        # a new path: the one whose mkdir came second failed with "cannot create
        # store directory: File exists". Each waits at a FIFO, all let go at once.
        for round_ in range(10):
            d = self.tempdir()
            fifo = os.path.join(d, "go")
            os.mkfifo(fifo)
            # the test holds the only writer, so the readers' opens do not block;
            # closing it wakes them all at once (end of file)
            gate = os.open(fifo, os.O_RDWR)
            uri = "lmdb:%s/store?create=yes" % d
            procs = [subprocess.Popen(["sh", "-c", 'read x < "$1"; exec "$0" gc --store "$2"',
                                       idem_bin(), fifo, uri],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for _ in range(12)]

            def at_the_gate(pid):
                try:
                    return os.readlink("/proc/%d/fd/0" % pid) == fifo
                except OSError:
                    return False
            wait_for(lambda: all(at_the_gate(p.pid) for p in procs), 10,
                     what="every process waiting at the FIFO")
            os.close(gate)
            for p in procs:
                out, err = p.communicate(timeout=30)
                self.assertEqual(p.returncode, 0, "round %d: %s" % (round_, err.decode()))
                self.assertEqual(json.loads(out), {"deleted": 0})


if __name__ == "__main__":
    main()
