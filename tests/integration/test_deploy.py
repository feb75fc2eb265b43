"""Every file in deploy/ and docs/ is checked: the example configs
pass --check-config (with certificates this suite generates), the
Kubernetes manifests parse and carry what a sidecar deployment needs, the
systemd unit passes `systemd-analyze verify` and is hardened, the config
reference was generated, and every message maitred prints is documented."""

import glob
import os
import re
import shutil
import subprocess
import unittest

import yaml

from harness import (MaitredTest, TestCA, MAITRED_BIN, SRCDIR, BUILDDIR, CALL_LIMIT, free_port, hosts_wrap, port_accepts,
                     wait_until)

DEPLOY = os.path.join(SRCDIR, "deploy")


class CertsMixin:
    def certs_into(self, d, sub):
        """The suite's test CA as d/sub/{ca.pem, client.pem, client.key}."""
        ca = getattr(self, "_ca", None) or TestCA(os.path.join(self.tmp, "ca"))
        self._ca = ca
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        for src, name in ((ca.ca_file, "ca.pem"), (ca.client_cert, "client.pem"), (ca.client_key, "client.key")):
            shutil.copy(src, os.path.join(d, sub, name))

    def check(self, text, name, cert_dir="certs"):
        d = os.path.join(self.tmp, "check-" + re.sub(r"[^A-Za-z0-9.]", "_", name))
        os.makedirs(d, exist_ok=True)
        self.certs_into(d, cert_dir)
        path = os.path.join(d, "maitred.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path


class Examples(CertsMixin, MaitredTest):
    def test_every_example_config_passes_check_config(self):
        files = sorted(glob.glob(os.path.join(DEPLOY, "*.yaml")) + glob.glob(os.path.join(DEPLOY, "examples", "*.yaml")))
        self.assertGreaterEqual(len(files), 13, files)
        policies, modes = set(), set()
        for f in files:
            with open(f) as fh:
                text = fh.read()
            self.assertTrue(text.startswith("#"), "%s: no annotation at the top" % f)
            path = self.check(text, os.path.basename(f))
            rc, out, err = self.run_maitred(["--check-config", path])
            self.assertEqual(rc, 0, "%s:\n%s%s" % (f, out, err))
            policies |= set(re.findall(r"policy: ([A-Z_]+)", text))
            modes |= set(re.findall(r"mode: ([A-Z_]+)", text))
        # One example per strategy (lib/lb/registry.c).
        with open(os.path.join(SRCDIR, "protos/maitred/config/v1/config.proto")) as fh:
            proto = fh.read()
        enum = proto[proto.index("enum Policy"):]
        enum = enum[:enum.index("}")]
        wanted = set(re.findall(r"^\s+([A-Z_]+) = [1-9]", enum, re.M))
        self.assertEqual(wanted - policies, set(), "strategies without an example in deploy/examples")
        # And one per fault mode the loader accepts (a mode whose comment
        # says it is refused at load has none yet).
        enum = proto[proto.index("message Fault {"):]
        enum = enum[enum.index("enum Mode"):]
        enum = enum[:enum.index("}")]
        wanted = set()
        for comment, name in re.findall(r"((?:^\s*//.*\n)*)^\s+([A-Z_]+) = [1-9]", enum, re.M):
            if "refused at load" not in " ".join(comment.split()):
                wanted.add(name)
        self.assertIn("FAILOVER", wanted)
        self.assertEqual(wanted - modes, set(), "fault modes without an example in deploy/examples")


class DocSnippets(CertsMixin, MaitredTest):
    def test_every_config_in_the_pages_passes_check_config(self):
        """Every YAML block of README.md and docs/*.md that is a config of
        its own (it has `services:` or `inbound:` at the top) passes
        --check-config, with the suite's certificates for the files it
        names: what a newcomer copies works as written."""
        fence = re.compile(r"^```yaml\n(.*?)^```", re.M | re.S)
        checked, bad = 0, []
        for page in ["README.md"] + sorted(glob.glob(os.path.join(SRCDIR, "docs", "*.md"))):
            with open(os.path.join(SRCDIR, page)) as f:
                text = f.read()
            for m in fence.finditer(text):
                block = m.group(1)
                if not re.search(r"^(services|inbound):", block, re.M):
                    continue  # a fragment of a config, shown in place
                line = text.count("\n", 0, m.start()) + 2
                name = "%s_%d" % (os.path.basename(page), line)
                certs = os.path.join(self.tmp, "check-" + name, "certs")
                for path, cert in (("/var/run/maitred/ca.crt", "ca.pem"), ("/var/run/maitred/tls.crt", "client.pem"),
                                   ("/var/run/maitred/tls.key", "client.key"), ('"ca.pem"', '"certs/ca.pem"')):
                    block = block.replace(path, cert if cert.startswith('"') else os.path.join(certs, cert))
                path = self.check(block, name)
                rc, out, err = self.run_maitred(["--check-config", path])
                checked += 1
                if rc != 0:
                    bad.append("%s:%d:\n%s" % (os.path.basename(page), line, err))
        self.assertGreaterEqual(checked, 8)
        self.assertEqual(bad, [])


class Dockerfile(unittest.TestCase):
    def test_runtime_image_has_every_library_maitred_links(self):
        """Every shared library maitred's binary names (NEEDED) comes from a
        package the Dockerfile's runtime stage installs, or one they depend
        on (Debian's metadata, read with dpkg -S and apt-cache). It lacked
        libevent-extra-2.1-7 and libevent-openssl-2.1-7 since maitred links
        libevent_core + libevent_extra + libevent_openssl instead of
        libevent: the image's maitred would not load."""
        if not shutil.which("dpkg") or not shutil.which("apt-cache") or not shutil.which("readelf"):
            self.skipTest("needs dpkg, apt-cache and readelf (Debian)")
        with open(os.path.join(DEPLOY, "Dockerfile")) as f:
            text = f.read()
        runtime = text[text.index("FROM debian:12-slim"):]
        install = re.search(r"apt-get install[^\n]*\\\n((?:.*\\\n)+)", runtime).group(1)
        pkgs = set(re.findall(r"\b([a-z0-9][a-z0-9.+-]+[0-9a-z])\b", install.replace("&&", " ")))
        have = set(pkgs)
        for p in pkgs:
            out = subprocess.run(["apt-cache", "depends", p], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 timeout=CALL_LIMIT).stdout.decode()
            have |= set(re.findall(r"^\s+Depends: (\S+)", out, re.M))
        needed = subprocess.run(["readelf", "-d", MAITRED_BIN], stdout=subprocess.PIPE,
                                timeout=CALL_LIMIT).stdout.decode()
        missing = []
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", needed):
            if re.match(r"lib(c|m|dl|pthread|rt|asan|ubsan|tsan|stdc\+\+|gcc_s)\.so", lib):
                continue  # libc6 (and the sanitizers' runtimes of a test build)
            res = subprocess.run(["dpkg", "-S", "*/" + lib], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 timeout=CALL_LIMIT).stdout.decode()
            owners = {ln.split(":")[0] for ln in res.splitlines() if ln}
            if owners and not owners & have:
                missing.append("%s (%s)" % (lib, ", ".join(sorted(owners))))
        self.assertEqual(missing, [], "libraries the runtime image lacks")


def hosts_of(cfg_text):
    return sorted(set(re.findall(r'address: "([A-Za-z][A-Za-z0-9.-]*):\d+"', cfg_text)))


class Kubernetes(CertsMixin, MaitredTest):
    def docs(self):
        out = []
        for f in sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "*.yaml"))):
            with open(f) as fh:
                out += [(f, d) for d in yaml.safe_load_all(fh) if d]
        self.assertTrue(out, "no manifest in deploy/kubernetes")
        return out

    def check_config_with_hosts(self, path, hosts):
        """--check-config resolves host names; cluster DNS names resolve to
        127.0.0.1 in a private mount namespace with its own /etc/hosts."""
        hosts = self.hosts_file("127.0.0.1 localhost\n::1 localhost\n" + "".join("127.0.0.1 %s\n" % h for h in hosts))
        argv = hosts_wrap(hosts) + [MAITRED_BIN, "--check-config", path]
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=CALL_LIMIT)
        err = res.stderr.decode(errors="replace")
        if res.returncode != 0 and ("unshare" in err or "mount" in err) and "maitred" not in err:
            self.skipTest("no private mount namespace here (%s)" % err.strip())
        out = res.stdout.decode(errors="replace")
        self.assert_no_sanitizer_report(res.returncode, out + err, "maitred --check-config " + path)
        return res.returncode, out, err

    def test_manifests_parse_and_carry_the_sidecar_essentials(self):
        docs = self.docs()
        deployments = [d for _, d in docs if d.get("kind") == "Deployment"]
        self.assertEqual(len(deployments), 1, "one app Deployment")
        dep = deployments[0]
        tmpl = dep["spec"]["template"]
        pod = tmpl["spec"]
        names = [c["name"] for c in pod["containers"]]
        self.assertIn("maitred", names)
        self.assertGreaterEqual(len(names), 2, "the app and maitred in one pod")
        side = next(c for c in pod["containers"] if c["name"] == "maitred")
        for c in pod["containers"]:
            self.assertIn("requests", c.get("resources", {}), "container %s has no resource requests" % c["name"])
        # The ConfigMap the sidecar mounts, and its config.
        cms = {d["metadata"]["name"]: d for _, d in docs if d.get("kind") == "ConfigMap"}
        mounted = set()
        for v in pod.get("volumes", []):
            if "configMap" in v:
                mounted.add(v["configMap"]["name"])
            for s in v.get("projected", {}).get("sources", []):
                if "configMap" in s:
                    mounted.add(s["configMap"]["name"])
        self.assertTrue(mounted & set(cms), "the sidecar mounts no ConfigMap of these manifests")
        cm = cms[sorted(mounted & set(cms))[0]]
        cfg_text = cm["data"]["maitred.yaml"]
        cfg = yaml.safe_load(cfg_text)
        admin_port = int(cfg["admin"].rsplit(":", 1)[1])
        self.assertIn("/etc/maitred/maitred.yaml", " ".join(side.get("args", [])))
        path = self.check(cfg_text, "configmap", cert_dir="tls")
        rc, out, err = self.check_config_with_hosts(path, hosts_of(cfg_text))
        self.assertEqual(rc, 0, out + err)
        # The admin (no authentication, POST /drain) on loopback only, no
        # container port for it; the probes are exec probes on loopback,
        # run here against a real maitred's admin.
        self.assertTrue(cfg["admin"].startswith("127.0.0.1:"), cfg["admin"])
        self.assertFalse(cfg.get("admin_allow_remote"), "admin_allow_remote in the pod's config")
        ports = {p["name"]: p["containerPort"] for p in side.get("ports", []) if "name" in p}
        self.assertNotIn(admin_port, ports.values(), "the admin port is a container port")
        probes = {"/ready": side["readinessProbe"], "/healthz": side["livenessProbe"]}
        self.probes_answer(probes, admin_port)
        # A preStop drain that waits for the exit.
        cmd = " ".join(side["lifecycle"]["preStop"]["exec"]["command"])
        self.assertIn("kill -TERM 1", cmd)
        self.assertIn("kill -0 1", cmd)
        self.assertGreater(pod["terminationGracePeriodSeconds"], int(cfg["drain_timeout"].rstrip("s")))
        # Mesh mode: the inbound listener is a container port a Service
        # targets; the app's own listener stays on loopback.
        if cfg.get("inbound"):
            in_port = int(cfg["inbound"][0]["listen"].rsplit(":", 1)[1])
            self.assertIn(in_port, ports.values(), "the inbound port is no container port")
            self.assertTrue(cfg["listen"].startswith("127.0.0.1:"), cfg["listen"])
            services = [d for _, d in docs if d.get("kind") == "Service"]
            targets = {p.get("targetPort") for sv in services for p in sv["spec"]["ports"]}
            names = {n for n, v in ports.items() if v == in_port}
            self.assertTrue(targets & (names | {in_port}), "no Service targets the inbound port")
        # No scrape annotation pointing Prometheus at a port it cannot reach.
        ann = tmpl["metadata"].get("annotations", {})
        self.assertNotEqual(ann.get("prometheus.io/port"), str(admin_port))

    def probes_answer(self, probes, admin_port):
        """Each exec probe (its path in the command) succeeds against a
        maitred whose admin is up and ready, and fails once it is gone."""
        if not shutil.which("bash"):
            self.skipTest("no bash")
        up = self.start_upstream("a")
        port = free_port()
        m = self.start_maitred(self.config([self.service("*", [up])], admin="127.0.0.1:%d" % port))
        wait_until(lambda: port_accepts(port, 0.5), CALL_LIMIT, "the admin port")

        def run(probe):
            argv = [a.replace("/%d" % admin_port, "/%d" % port) for a in probe["exec"]["command"]]
            return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=CALL_LIMIT).returncode
        for path, probe in probes.items():
            self.assertIn("exec", probe, "%s: an exec probe (the admin is on loopback)" % path)
            self.assertIn(path, " ".join(probe["exec"]["command"]))
            self.assertIn("127.0.0.1/%d" % admin_port, " ".join(probe["exec"]["command"]))
            wait_until(lambda: run(probe) == 0, CALL_LIMIT, "the %s probe to pass" % path)
        self.stop_maitred(m)
        for path, probe in probes.items():
            self.assertNotEqual(run(probe), 0, "the %s probe passes with maitred stopped" % path)


class Systemd(MaitredTest):
    def test_unit_verifies_and_is_hardened(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("no systemd-analyze (Debian: systemd)")
        unit = os.path.join(DEPLOY, "systemd", "maitred.service")
        with open(unit) as f:
            text = f.read()
        # systemd-analyze verify in a root of our own: the unit, the binary it
        # runs, kill for ExecReload, and the system's units it depends on.
        root = os.path.join(self.tmp, "root")
        for d in ("usr/local/bin", "etc/systemd/system", "bin", "usr/lib/systemd"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        shutil.copy(MAITRED_BIN, os.path.join(root, "usr/local/bin/maitred"))
        shutil.copy(shutil.which("kill") or "/bin/kill", os.path.join(root, "bin/kill"))
        shutil.copy(unit, os.path.join(root, "etc/systemd/system/maitred.service"))
        shutil.copytree("/lib/systemd/system", os.path.join(root, "usr/lib/systemd/system"), symlinks=True)
        res = subprocess.run(["systemd-analyze", "verify", "--root=" + root, "/etc/systemd/system/maitred.service"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=CALL_LIMIT)
        out = res.stdout.decode(errors="replace")
        self.assertEqual(res.returncode, 0, out)
        # verify exits 0 on a value it ignores: any word about the unit fails.
        self.assertNotIn("maitred.service", out, out)
        keys = {}
        for line in text.splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                keys.setdefault(k.strip(), []).append(v.strip())
        self.assertTrue(keys.get("User") and keys["User"][0] not in ("root", "0"), "a dedicated user")
        self.assertIn(keys.get("ProtectSystem", [""])[0], ("strict", "full"))
        self.assertTrue(any("-HUP" in v for v in keys.get("ExecReload", [])), "reload via SIGHUP")
        self.assertIn("--check-config", " ".join(keys.get("ExecStartPre", [])))
        self.assertEqual(keys.get("NoNewPrivileges"), ["yes"])


class Docs(unittest.TestCase):
    def test_config_reference_generated_with_every_field(self):
        ref = os.path.join(BUILDDIR, "docs", "config-reference.md")
        self.assertTrue(os.path.exists(ref), "make did not generate %s" % ref)
        with open(ref) as f:
            text = f.read()
        with open(os.path.join(SRCDIR, "protos/maitred/config/v1/config.proto")) as f:
            proto = f.read()
        fields = set(re.findall(r"^\s+(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+;", proto, re.M))
        enums = {f for f in fields if f.isupper()}
        for name in sorted(fields - enums):
            self.assertIn("| `%s` |" % name, text, "config-reference.md lacks %s" % name)
        self.assertIn("## Config", text)

    def test_maitred_builds_by_name_in_a_fresh_tree(self):
        """`make sidecar/maitred` in a tree just configured (operating.md's
        TSan recipe; deploy/tsan.sh also names unit suites): BUILT_SOURCES
        precede only all, check and install, so every object of maitred, of
        libmaitred.a and of the unit suites must wait for the
        generated headers (gen/.stamp) itself. It did not: the first object
        that includes one failed, "discovery.pb-c.h: No such file"."""
        res = subprocess.run(["make", "-C", BUILDDIR, "-p", "-n", "-q", "sidecar/maitred"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=CALL_LIMIT)
        rules = {}
        for line in res.stdout.decode(errors="replace").splitlines():
            m = re.match(r"^((?:sidecar/[\w/]*maitred-|lib/[\w/]*libmaitred_a-|tests/unit/[\w/]*test_)"
                         r"[\w-]+\.o):(.*)$", line)
            if m:
                rules.setdefault(m.group(1), []).append(m.group(2))
        self.assertIn("sidecar/control/maitred-xds_subscribe.o", rules)
        self.assertIn("lib/xds/libmaitred_a-cla.o", rules)
        # deploy/tsan.sh makes unit suites by name too; test_lb_orca includes a generated header.
        self.assertIn("tests/unit/lb/test_lb_orca-test_orca.o", rules)
        lacking = sorted(o for o, deps in rules.items()
                         if not any("gen/.stamp" in d.split() for d in deps))
        self.assertEqual(lacking, [], "objects that do not wait for gen/.stamp")

    def test_config_reference_links_resolve_and_maps_read_as_maps(self):
        """Every link of the generated reference names a heading of it, and a
        map field (Split.weights, Otlp.headers, Endpoint.metadata) reads as
        the mapping it is written as: it read "list of [Split.WeightsEntry]",
        a link to no section, which sends a reader to write a list of
        {key, value} objects that the loader refuses."""
        with open(os.path.join(BUILDDIR, "docs", "config-reference.md")) as f:
            text = f.read()
        heads = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
                 for h in re.findall(r"^#+ (.+)$", text, re.M)}
        links = set(re.findall(r"\]\(#([^)]+)\)", text))
        self.assertEqual(sorted(links - heads), [], "links to no heading")
        self.assertNotIn("Entry]", text)
        self.assertIn("| `weights` | map of string to uint32 |", text)
        self.assertIn("| `metadata` | map of string to string |", text)

    def test_config_keys_named_in_docs_exist(self):
        """A key path the pages name (`upstream.keepalive_interval`,
        `services[].tls.ca_file`) whose first key is one of Config's or
        Service's: every key of it is a field of config.proto. The
        troubleshooting page sent operators to `upstream.keepalive`."""
        with open(os.path.join(SRCDIR, "protos/maitred/config/v1/config.proto")) as f:
            proto = f.read()
        field = r"^\s+(?:repeated\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+"
        fields = set(re.findall(field, proto, re.M))

        def top_fields(name):
            body = proto[proto.index("message %s {" % name):]
            out, depth = set(), 0
            for ln in body.splitlines():
                depth += ln.count("{") - ln.count("}")
                m = re.match(field, ln)
                if m and depth == 1:
                    out.add(m.group(1))
                if depth == 0:
                    return out
        roots = top_fields("Config") | top_fields("Service")
        not_config = {"xds.clusters"}  # /config_dump's xds section, not a config key
        bad = []
        for page in ["README.md"] + sorted(glob.glob(os.path.join(SRCDIR, "docs", "*.md"))):
            with open(os.path.join(SRCDIR, page)) as f:
                for n, line in enumerate(f, 1):
                    for tok in re.findall(r"`([a-z_]+(?:\[\d*\])?(?:\.[a-z_]+(?:\[\d*\])?)+)`", line):
                        keys = [re.sub(r"\[\d*\]", "", k) for k in tok.split(".")]
                        if keys[0] in roots and tok not in not_config and any(k not in fields for k in keys):
                            bad.append("%s:%d: %s" % (os.path.basename(page), n, tok))
        self.assertEqual(bad, [], "keys config.proto does not have")

    def test_every_message_is_in_troubleshooting(self):
        """Every format string the daemon logs or answers with."""
        with open(os.path.join(SRCDIR, "docs", "troubleshooting.md")) as f:
            doc = f.read()
        pat = re.compile(r'(?:MTD_(?:ERROR|WARN|INFO)\(|mtd_call_fail\(\w+, [\w()]+,|up_fail\(\w+,|'
                         r'snprintf\(err, errlen,)\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
        literal = re.compile(r'"((?:[^"\\]|\\.)*)"')
        missing = []
        for src in sorted(glob.glob(os.path.join(SRCDIR, "sidecar", "**", "*.c"), recursive=True)):
            with open(src) as f:
                code = f.read()
            for lits in pat.findall(code):
                # Adjacent literals are one string (C's concatenation).
                fmt = "".join(literal.findall(lits)).replace('\\"', '"')
                if fmt in ("%s", "%s: %s", "%s%s%s"):
                    continue  # built from parts documented in their own form
                # In a message cell, whole or as its tail ("upstream %s: " + it).
                if not re.search(r"`[^`|]*" + re.escape(fmt) + "`", doc):
                    missing.append("%s: %s" % (os.path.basename(src), fmt))
        self.assertEqual(missing, [], "add these to docs/troubleshooting.md")


if __name__ == "__main__":
    unittest.main()
