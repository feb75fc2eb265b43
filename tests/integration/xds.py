"""The xDS test peers for the integration tests: tests/xds/server.js (a
state-of-the-world ADS management server) and tests/xds/client.js (a
proxyless @grpc/grpc-js-xds client), both on Node.js, and the resources
they speak, written as proto3 JSON with Envoy's field names.

    s = XdsServer(tmp)                 # tls=dict(cert=, key=, ca=) serves TLS
    s.start()                          # s.port: the ADS port
    s.set("cluster", [cluster("shop.Echo")])
    s.set("endpoint", [assignment("shop.Echo", [locality([("127.0.0.1", 5001)])])])
    s.wait_for(lambda log: any(acked(r, EDS) for r in log), 10, "an EDS ACK")
    s.stop(); s.start(same_port=True)  # the server down and back

The Node packages are installed by `npm ci` in tests/xds (its package-lock.json
pins them) the first time a test needs them, under a lock, so that test
files running side by side install once; deploy/run-tests.sh installs them
before the tests.
"""

import json
import os
import subprocess
import time
import urllib.request

import nodepeers

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("MAITRED_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
PEERS = os.path.join(SRC, "tests", "xds")

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
HCM = ("type.googleapis.com/envoy.extensions.filters.network."
       "http_connection_manager.v3.HttpConnectionManager")
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
FAULT = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"

START_LIMIT = 30.0


def node_missing():
    """Why the Node peers cannot run here, or None."""
    return nodepeers.node_missing()


def install_peers():
    """npm ci in tests/xds once."""
    nodepeers.install("xds")


class XdsServer:
    def __init__(self, tmp, tls=None, host="127.0.0.1", every=None):
        """host: the loopback address the ADS port is bound to (the
        control port is always on 127.0.0.1); every: a kind ("cluster")
        whose every resource goes to whoever asked for that kind, whatever
        names it asked for (as istiod sends every cluster)."""
        self.tmp = tmp
        self.tls = tls
        self.host = host
        self.every = every
        self.port = 0
        self.control = 0
        self.proc = None
        self._log = None
        self._resources = {}

    def start(self, same_port=False):
        install_peers()
        argv = ["node", os.path.join(PEERS, "server.js"), "--host", self.host,
                "--port", str(self.port if same_port else 0)]
        if self._resources:
            # A restarted server serves what was set before it went down,
            # from its first stream on: a client reconnecting before a PUT
            # would otherwise be sent an empty state of the world.
            state = os.path.join(self.tmp, "xds-resources.json")
            with open(state, "w") as f:
                json.dump(self._resources, f)
            argv += ["--resources", state]
        if self.every:
            argv += ["--every", self.every]
        if self.tls:
            argv += ["--tls-cert", self.tls["cert"], "--tls-key", self.tls["key"]]
            if self.tls.get("ca"):
                argv += ["--tls-ca", self.tls["ca"]]
        self._log = open(os.path.join(self.tmp, "xds-server.log"), "ab")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log)
        line = self._readline(START_LIMIT)
        info = json.loads(line)
        self.port, self.control = info["ads_port"], info["control_port"]
        return self

    def _readline(self, limit):
        import select
        deadline = time.monotonic() + limit
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise AssertionError("xds server did not start (rc %s); see %s/xds-server.log"
                                     % (self.proc.poll(), self.tmp))
            r, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if r:
                b = os.read(self.proc.stdout.fileno(), 4096)
                if not b:
                    continue
                buf += b
        return buf.decode()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc:
            self.proc.stdout.close()
        if self._log:
            self._log.close()
            self._log = None
        self.proc = None

    def _http(self, method, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.control, path), method=method,
                                     data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError("xds server refused %s %s: %s" % (method, path, e.read().decode()))

    def _put(self, kind, resources):
        return self._http("PUT", "/resources/" + kind, resources)

    def set(self, kind, resources):
        """Replace every resource of kind (cluster, endpoint, listener,
        route), pushed at once to the streams that asked for it."""
        self._resources[kind] = resources
        return self._put(kind, resources)["version"]

    def batch(self, steps):
        """Replace several kinds' resources, [(kind, resources)], pushed
        back to back on each stream in that order (POST /batch: an EDS
        change right behind a CDS push); their versions."""
        for kind, res in steps:
            self._resources[kind] = res
        got = self._http("POST", "/batch", [dict(method="PUT", kind=k, resources=r) for k, r in steps])
        return [r["version"] for r in got]

    def log(self):
        return self._http("GET", "/log")

    def streams(self):
        return self._http("GET", "/streams")["open"]

    def wait_for(self, pred, limit, what):
        deadline = time.monotonic() + limit
        while True:
            log = self.log()
            if pred(log):
                return log
            if time.monotonic() > deadline:
                raise AssertionError("xds: no %s within %.0f s; requests seen:\n%s"
                                     % (what, limit, json.dumps(log[-20:], indent=1)))
            time.sleep(0.05)


def acked(req, type_url, version=None):
    """req (a log entry) ACKs a response of type_url (of version, if given)."""
    return (req["type_url"] == type_url and req["response_nonce"] != "" and not req["error_detail"]
            and (version is None or req["version_info"] == str(version)))


def nacked(req, type_url):
    return req["type_url"] == type_url and bool(req["error_detail"])


# Resources, as proto3 JSON.

def cluster(name, lb_policy="ROUND_ROBIN", eds_name=None, **extra):
    c = {"name": name, "type": "EDS", "lb_policy": lb_policy,
         "eds_cluster_config": {"eds_config": {"ads": {}}}}
    if eds_name:
        c["eds_cluster_config"]["service_name"] = eds_name
    c.update(extra)
    return c


def lb_endpoint(host, port, weight=None, health=None):
    e = {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}
    if weight is not None:
        e["load_balancing_weight"] = weight
    if health:
        e["health_status"] = health
    return e


def locality(endpoints, zone="", weight=None, priority=0):
    """endpoints: (host, port) pairs or lb_endpoint() dicts."""
    loc = {"locality": {"zone": zone},
           "lb_endpoints": [e if isinstance(e, dict) else lb_endpoint(*e) for e in endpoints],
           "priority": priority}
    # grpc-js-xds drops a locality whose weight is unset (gRPC's rule).
    loc["load_balancing_weight"] = 1 if weight is None else weight
    return loc


def assignment(name, localities):
    return {"cluster_name": name, "endpoints": localities}


def listener(name, route_name, fault=None):
    """An API listener (as proxyless gRPC clients take one) whose
    HttpConnectionManager names a RouteConfiguration over ADS; with
    fault (an HTTPFault dict), the fault filter "fault" before the router."""
    filters = [{"name": "router", "typed_config": {"@type": ROUTER}}]
    if fault is not None:
        filters.insert(0, {"name": "fault", "typed_config": dict({"@type": FAULT}, **fault)})
    return {"name": name,
            "api_listener": {"api_listener": {
                "@type": HCM,
                "rds": {"route_config_name": route_name, "config_source": {"ads": {}}},
                "http_filters": filters}}}


def fault_abort(status, numerator=100, denominator="HUNDRED", http=False):
    """An HTTPFault's abort: a gRPC status (or an HTTP one) for a share."""
    return {"abort": {("http_status" if http else "grpc_status"): status,
                      "percentage": {"numerator": numerator, "denominator": denominator}}}


def fault_delay(duration, numerator=100, denominator="HUNDRED"):
    return {"delay": {"fixed_delay": duration, "percentage": {"numerator": numerator, "denominator": denominator}}}


def route_config(name, routes, domains=("*",)):
    """routes: route dicts, e.g. route_to("shop.Echo")."""
    return {"name": name, "virtual_hosts": [{"name": name, "domains": list(domains), "routes": routes}]}


def route_to(cluster_name, prefix="/"):
    return {"match": {"prefix": prefix}, "route": {"cluster": cluster_name}}


def provider_tls(identity="identity", roots="roots", sni="echo.test"):
    """A cluster's transport_socket: an UpstreamTlsContext naming the
    bootstrap's certificate provider instances (gRFC A29)."""
    return {"name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {
                    "tls_certificate_provider_instance": {"instance_name": identity},
                    "validation_context": {"ca_certificate_provider_instance": {"instance_name": roots}}},
                "sni": sni}}


def bootstrap(path, port, node_id="maitred-test", zone="", tls=False, providers=None):
    """A gRPC xDS bootstrap file for server at 127.0.0.1:port
    (providers: its certificate_providers, {name: file_watcher config})."""
    creds = [{"type": "tls", "config": {}}] if tls else [{"type": "insecure"}]
    doc = {"xds_servers": [{"server_uri": "127.0.0.1:%d" % port, "channel_creds": creds,
                            "server_features": ["xds_v3"]}],
           "node": {"id": node_id, "locality": {"zone": zone}}}
    if providers is not None:
        doc["certificate_providers"] = {name: {"plugin_name": "file_watcher", "config": conf}
                                        for name, conf in providers.items()}
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def run_client(bootstrap_path, target, calls, limit=60.0, header=None, xds_creds=False):
    """tests/xds/client.js: calls unary Echo calls through grpc-js-xds
    (header: a (name, value) request header on each; xds_creds: TLS as
    the clusters and the bootstrap's certificate_providers say); returns
    its JSON summary (ok, failed, instances)."""
    install_peers()
    env = dict(os.environ, GRPC_XDS_BOOTSTRAP=bootstrap_path)
    extra = ["--header", "%s=%s" % header] if header else []
    extra += ["--xds-creds"] if xds_creds else []
    r = subprocess.run(["node", os.path.join(PEERS, "client.js"), "--target", target,
                        "--calls", str(calls)] + extra, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=limit)
    if r.returncode != 0 or not r.stdout.strip():
        raise AssertionError("xds client failed (rc %d):\n%s" % (r.returncode, r.stderr.decode(errors="replace")))
    return json.loads(r.stdout.decode().strip().splitlines()[-1])
