"""The command line and the config file: bad configs refused with
FILE:LINE:COL: field.path: message, --check-config, --version, --help, the
embedded default config."""

import json
import os
import re
import unittest

from harness import (MaitredTest, TestCA, maitred_only, free_port, port_in_use, pb, SRCDIR,
                     CALL_LIMIT, START_LIMIT, wait_until)

ERR = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<path>[^:\s]+): (?P<msg>.+)$")
# A syntax error has no field path: FILE:LINE:COL: message.
SYNTAX_ERR = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<path>)(?P<msg>.+)$")

GOOD = """\
listen: "127.0.0.1:{port}"
admin: "127.0.0.1:{admin}"
workers: 1
drain_timeout: "2s"
downstream:
  max_message_size: 8388608
services:
  - name: "maitred.testing.v1.Echo"
    lb:
      policy: ROUND_ROBIN
    endpoints:
      - address: "127.0.0.1:50051"
        weight: 100
      - address: "127.0.0.1:50052"
  - name: "*"
    upstream:
      connect_timeout: "250ms"
    endpoints:
      - address: "127.0.0.1:50053"
"""

# (name, config text, the line the error must point at, a word the field
# path must contain). {port} is filled in.
BAD = [
    ("unknown top-level key", 'listen: "127.0.0.1:{port}"\nlisten_address: "x"\nservices:\n'
     '  - name: "*"\n    endpoints:\n      - address: "127.0.0.1:1"\n', 2, "listen_address"),
    ("unknown nested key", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    lb:\n'
     '      policy: ROUND_ROBIN\n      polcy: RANDOM\n    endpoints:\n      - address: "127.0.0.1:1"\n', 6, "polcy"),
    ("wrong type", 'listen: "127.0.0.1:{port}"\nworkers: "many"\nservices:\n  - name: "*"\n'
     '    endpoints:\n      - address: "127.0.0.1:1"\n', 2, "workers"),
    ("list where a map goes", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    lb: [1, 2]\n'
     '    endpoints:\n      - address: "127.0.0.1:1"\n', 4, "lb"),
    ("bad endpoint address", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    endpoints:\n'
     '      - address: "127.0.0.1:1"\n      - address: "127.0.0.1:99999"\n', 6, "address"),
    ("endpoint without port", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    endpoints:\n'
     '      - address: "127.0.0.1"\n', 5, "address"),
    ("bad listen address", 'listen: "nowhere"\nservices:\n  - name: "*"\n    endpoints:\n'
     '      - address: "127.0.0.1:1"\n', 1, "listen"),
    ("unknown policy", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    lb:\n      policy: FASTEST\n'
     '    endpoints:\n      - address: "127.0.0.1:1"\n', 5, "policy"),
    ("duplicate service", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "a.B"\n    endpoints:\n'
     '      - address: "127.0.0.1:1"\n  - name: "a.B"\n    endpoints:\n      - address: "127.0.0.1:2"\n', 6, "name"),
    ("missing endpoints", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "a.B"\n    endpoints:\n'
     '      - address: "127.0.0.1:1"\n  - name: "c.D"\n    lb:\n      policy: ROUND_ROBIN\n', (6, 8), "endpoints"),
    ("bad duration", 'listen: "127.0.0.1:{port}"\ndrain_timeout: "ten seconds"\nservices:\n  - name: "*"\n'
     '    endpoints:\n      - address: "127.0.0.1:1"\n', 2, "drain_timeout"),
    ("negative number for uint", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    endpoints:\n'
     '      - address: "127.0.0.1:1"\n        weight: -5\n', 6, "weight"),
    ("yaml syntax error", 'listen: "127.0.0.1:{port}"\nservices:\n  - name: "*\n    endpoints: [\n', (3, 5), None),
]


def version():
    with open(os.path.join(SRCDIR, "configure.ac")) as f:
        m = re.search(r"AC_INIT\(\[maitred\],\s*\[([^\]]+)\]", f.read())
    return m.group(1) if m else None


class Cli(MaitredTest):
    @maitred_only
    def test_version(self):
        rc, out, err = self.run_maitred(["--version"])
        self.assertEqual(rc, 0, err)
        self.assertIn("maitred", out)
        v = version()
        if v:
            self.assertIn(v, out)

    @maitred_only
    def test_help(self):
        rc, out, err = self.run_maitred(["--help"])
        self.assertEqual(rc, 0, err)
        for opt in ("--config", "--check-config", "--log-level", "--version"):
            self.assertIn(opt, out)

    @maitred_only
    def test_unknown_option_is_refused(self):
        rc, out, err = self.run_maitred(["--no-such-option"])
        self.assertNotEqual(rc, 0)
        self.assertIn("--no-such-option", err)

    @maitred_only
    def test_bad_log_level_is_refused(self):
        path = self.write_config(GOOD.format(port=free_port(), admin=free_port()))
        rc, out, err = self.run_maitred(["--config", path, "--log-level", "chatty"])
        self.assertNotEqual(rc, 0)
        self.assertIn("chatty", err)

    @maitred_only
    def test_config_path_that_is_a_fifo(self):
        """--config and --check-config on a FIFO nobody writes: refused at
        once, saying what the path is (both blocked in open() forever)."""
        path = os.path.join(self.tmp, "fifo.yaml")
        os.mkfifo(path)
        for args in (["--check-config", path], ["--config", path]):
            rc, out, err = self.run_maitred(args, limit=10)
            self.assertEqual(rc, 1, err)
            self.assertIn("%s: not a regular file (a FIFO)" % path, err)

    @maitred_only
    def test_missing_config_file(self):
        path = os.path.join(self.tmp, "nope.yaml")
        for args in (["--check-config", path], ["--config", path]):
            rc, out, err = self.run_maitred(args)
            self.assertEqual(rc, 1, err)
            self.assertIn(path, err)


class CheckConfig(MaitredTest):
    @maitred_only
    def test_good_config_checks(self):
        path = self.write_config(GOOD.format(port=free_port(), admin=free_port()))
        rc, out, err = self.run_maitred(["--check-config", path])
        self.assertEqual(rc, 0, err)

    @maitred_only
    def test_json_and_lower_camel_accepted(self):
        cfg = {"listen": "127.0.0.1:%d" % free_port(), "drainTimeout": "1.5s",
               "downstream": {"maxMessageSize": 1048576},
               "services": [{"name": "*", "lb": {"policy": "WEIGHTED_ROUND_ROBIN"},
                             "endpoints": [{"address": "127.0.0.1:50051", "weight": 5}]}]}
        path = os.path.join(self.tmp, "maitred.json")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        rc, out, err = self.run_maitred(["--check-config", path])
        self.assertEqual(rc, 0, err)

    def check_bad(self, args_for, text, want_line, word):
        path = self.write_config(text.format(port=free_port()), name="bad.yaml")
        rc, out, err = self.run_maitred(args_for(path))
        self.assertEqual(rc, 1, "exit %s; stderr:\n%s" % (rc, err))
        lines = [(ERR if word else SYNTAX_ERR).match(ln) for ln in err.splitlines()]
        hits = [m for m in lines if m and m.group("file") == path]
        self.assertTrue(hits, "no FILE:LINE:COL: field: message line naming %s in stderr:\n%s" % (path, err))
        lo, hi = want_line if isinstance(want_line, tuple) else (want_line, want_line)
        first = hits[0]
        self.assertTrue(lo <= int(first.group("line")) <= hi,
                        "error points at line %s, want %s:\n%s" % (first.group("line"), want_line, err))
        self.assertGreaterEqual(int(first.group("col")), 1)
        if word:
            self.assertIn(word, first.group("path") + " " + first.group("msg"), err)
        return err

    @maitred_only
    def test_bad_configs_check_config(self):
        for name, text, line, word in BAD:
            with self.subTest(name):
                self.check_bad(lambda p: ["--check-config", p], text, line, word)

    @maitred_only
    def test_bad_configs_refused_at_startup(self):
        for name, text, line, word in BAD:
            with self.subTest(name):
                self.check_bad(lambda p: ["--config", p], text, line, word)

    @maitred_only
    def test_tls_files_must_exist(self):
        text = ('listen: "127.0.0.1:{port}"\nservices:\n  - name: "*"\n    tls:\n'
                '      ca_file: "/nonexistent/ca.pem"\n      server_name: "x.test"\n'
                '    endpoints:\n      - address: "127.0.0.1:1"\n')
        err = self.check_bad(lambda p: ["--check-config", p], text, (4, 5), None)
        self.assertIn("/nonexistent/ca.pem", err)


    @maitred_only
    def test_tls_files_that_do_not_load_are_refused(self):
        """A TLS file that reads but does not load (no certificate in it, a
        key that is not the certificate's) is refused by --check-config as by
        the start, naming where and the file: --check-config once said OK to
        all of these while the start refused four and started two without
        the source or registration that needed them."""
        ca = TestCA(os.path.join(self.tmp, "ca"))
        empty = os.path.join(self.tmp, "empty.pem")
        open(empty, "w").close()
        port, admin = free_port(), free_port()
        etcd_tls = '{endpoints: ["127.0.0.1:1"], prefix: "/x/", tls: {ca_file: "%s"}}' % empty
        static = '  - name: "a.B"\n    endpoints: [{address: "127.0.0.1:1"}]\n'
        cases = [
            ("service CA", 'services:\n  - name: "a.B"\n    endpoints: [{address: "127.0.0.1:1"}]\n'
             '    tls: {ca_file: "%s"}\n' % empty, "service a.B: TLS: " + empty),
            ("service key mismatch", 'services:\n  - name: "a.B"\n    endpoints: [{address: "127.0.0.1:1"}]\n'
             '    tls: {ca_file: "%s", cert_file: "%s", key_file: "%s"}\n'
             % (ca.ca_file, ca.client_cert, ca.server_key), "service a.B: TLS: " + ca.server_key),
            ("inbound key", 'inbound:\n  - listen: "127.0.0.1:%d"\n    app: "127.0.0.1:1"\n'
             '    tls: {cert_file: "%s", key_file: "%s"}\n' % (admin, ca.server_cert, empty),
             "inbound[0] (127.0.0.1:%d): TLS: %s" % (admin, empty)),
            ("xds CA", 'xds: {server: "127.0.0.1:1", node_id: n, tls: {ca_file: "%s"}}\nservices:\n'
             '  - name: "a.B"\n    discovery: {xds: {}}\n' % empty, "xds.tls: " + empty),
            ("tracing CA", 'tracing: {otlp: {endpoint: "https://127.0.0.1:1/v1/traces", tls: {ca_file: "%s"}}}\n'
             'services:\n' % empty + static, "tracing: " + empty),
            ("etcd CA", 'services:\n  - name: "a.B"\n    discovery: {etcd: %s}\n' % etcd_tls,
             "service a.B: discovery.etcd.tls: " + empty),
            ("register etcd CA", 'register:\n  - service: "a.B"\n    address: "10.0.0.7:8080"\n'
             '    etcd: %s\nservices:\n' % etcd_tls + static, "register[0] (a.B): etcd.tls: " + empty),
        ]
        for name, body, want in cases:
            with self.subTest(name):
                path = self.write_config('listen: "127.0.0.1:%d"\n' % port + body, name="tls.yaml")
                rc, out, err = self.run_maitred(["--check-config", path])
                self.assertEqual(rc, 1, "--check-config said:\n%s%s" % (out, err))
                self.assertIn("%s: %s" % (path, want), err)
                self.assertNotIn("OK", out)


class RegisterStart(MaitredTest):
    @maitred_only
    def test_register_that_cannot_start_says_why(self):
        """A register entry whose etcd TLS files do not load: the start
        runs on without it, and its line says TLS may be the cause (it said
        "out of memory", which sends an operator the wrong way)."""
        empty = os.path.join(self.tmp, "empty.pem")
        open(empty, "w").close()
        reg = {"service": "a.B", "address": "10.0.0.7:8080",
               "etcd": {"endpoints": ["127.0.0.1:1"], "prefix": "/x/", "tls": {"ca_file": empty}}}
        m = self.start_maitred(self.config([self.service("a.B", ["127.0.0.1:1"])], register=[reg]))
        lines = lambda: [ln for ln in m.proc.output().splitlines() if "register: cannot start" in ln]
        wait_until(lines, START_LIMIT, "the register line")
        self.assertIn("unusable etcd TLS files", lines()[0])


class EmbeddedDefault(MaitredTest):
    @maitred_only
    def test_no_config_runs_embedded_default(self):
        busy = [p for p in (15001, 50051, 50052, 50053) if port_in_use(p)]
        if busy:
            self.skipTest("ports in use: %s" % busy)
        ups = [self.start_upstream("demo-%d" % p, port=p) for p in (50051, 50052, 50053)]
        from harness import Maitred, Proc, LOG_LEVEL, maitred_argv, maitred_env
        proc = Proc("maitred-default", maitred_argv(["--log-level", LOG_LEVEL]), self.tmp, env=maitred_env())
        self._procs.append((proc, True))
        m = Maitred(proc, 15001, None)
        self.wait_listening(m)
        stub = self.echo(m)
        names = [stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(30)]
        self.assertEqual(sorted(set(names)), sorted(u.name for u in ups))
        # Any service goes to the catch-all.
        raw = self.channel(m).unary_unary("/any.Service/Unary")(pb.EchoRequest().SerializeToString(),
                                                                  timeout=CALL_LIMIT)
        self.assertIn(pb.EchoResponse.FromString(raw).instance, names)
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
