'use strict';
// A state-of-the-world xDS management server for maitred's tests: one
// AggregatedDiscoveryService (ADS) on @grpc/grpc-js, serving the resources a
// test sets, recording every DiscoveryRequest it receives (ACKs and NACKs
// among them). Envoy's API protos come from @grpc/grpc-js-xds's deps/.
//
//   node server.js [--host A] [--port N] [--resources F] [--every KIND]
//                  [--tls-cert F --tls-key F [--tls-ca F]]
//
// prints one JSON line on stdout once it serves: {"ads_port":N,"control_port":M}
// (--port 0 or none: any free port). --resources F: a JSON object
// {kind: [resources]} served from the first stream on, as if PUT before
// the ADS port opened (a restarted server never answers a client that
// reconnects at once with an empty state of the world). --every KIND: every
// resource of KIND goes to every stream that asked for KIND, whatever names
// it asked for (istiod answers CDS with every cluster of the mesh). The control port speaks HTTP/1.1 on
// 127.0.0.1:
//   PUT  /resources/<kind>   body: a JSON array of resources in proto3 JSON
//                            with Envoy's field names (snake_case), kind one of
//                            cluster, endpoint, listener, route. Replaces
//                            every resource of that kind, bumps its version
//                            and pushes it to every stream that asked for it.
//                            Wrappers as bare values, durations as "1.5s" or
//                            {"seconds": 1}, an Any as {"@type":
//                            "type.googleapis.com/...", ...}.
//                            400 with the reason when a resource does not
//                            encode. Answers {version, sent_ns}: sent_ns,
//                            the monotonic clock (CLOCK_MONOTONIC, ns, as a
//                            string) when the response was handed to the
//                            last stream's grpc-js call, null if none asked.
//   PATCH /resources/<kind>  as PUT, but the resources in the body replace or
//                            add only those of their names; the others stay
//                            (a change of one among 10,000 without sending
//                            and encoding all of them again). The response
//                            pushed is still the whole state of the world.
//   GET  /log                a JSON array, one entry per DiscoveryRequest:
//                            {stream, type_url, version_info, response_nonce,
//                             resource_names, error_detail, node_id, zone,
//                             at_ns: CLOCK_MONOTONIC in ns when it arrived}
//   GET  /log?since=N&brief=1  the same from entry N on; brief: each entry's
//                            resource_names replaced by their count,
//                            n_resource_names (10,000 names a request)
//   POST /batch              body: a JSON array of {method: "PUT" | "PATCH",
//                            kind, resources}, applied and pushed in order
//                            in one go (a CDS push, then an EDS change
//                            right behind it on the stream); answers an
//                            array of the {version, sent_ns} of each
//   GET  /streams            how many ADS streams are open now
//
// Subscription rules (state of the world): an empty resource_names list is
// a wildcard for clusters and listeners (everything) and means nothing for
// endpoints and routes. A response is sent when a stream's subscription of a
// type changes, or that type's resources change; a NACK (error_detail set)
// of the latest response is not answered until something changes.

const http = require('http');
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const deps = path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const includeDirs = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => path.join(deps, d));

const KINDS = {
  cluster: 'envoy.config.cluster.v3.Cluster',
  endpoint: 'envoy.config.endpoint.v3.ClusterLoadAssignment',
  listener: 'envoy.config.listener.v3.Listener',
  route: 'envoy.config.route.v3.RouteConfiguration',
};
const WILDCARD = new Set(['cluster', 'listener']);
const typeUrl = (kind) => 'type.googleapis.com/' + KINDS[kind];
const kindOf = (url) => Object.keys(KINDS).find((k) => typeUrl(k) === url);

function parseArgs(argv) {
  const o = { port: 0, host: '127.0.0.1' };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    o[k.replace(/-/g, '_')] = argv[i + 1];
  }
  o.port = Number(o.port || 0);
  return o;
}

// Resources are encoded with protobufjs from the same protos, so that every
// extension a resource's Any may name (HttpConnectionManager, the TLS
// contexts, the fault filter, the router) resolves.
const root = new protobuf.Root();
root.resolvePath = (origin, target) => {
  for (const d of includeDirs) {
    const p = path.join(d, target);
    if (fs.existsSync(p)) return p;
  }
  return protobuf.util.path.resolve(origin, target);
};
root.loadSync([
  'envoy/config/cluster/v3/cluster.proto',
  'envoy/config/endpoint/v3/endpoint.proto',
  'envoy/config/listener/v3/listener.proto',
  'envoy/config/route/v3/route.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/http/fault/v3/fault.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
], { keepCase: true });
root.resolveAll();

// proto3 JSON's forms protobufjs's fromObject does not take: a wrapper
// (UInt32Value...) as its bare value, a Duration as "1.5s". Walks obj along
// type T and rewrites them in place.
const WRAPPERS = new Set(['DoubleValue', 'FloatValue', 'Int64Value', 'UInt64Value', 'Int32Value',
                          'UInt32Value', 'BoolValue', 'StringValue', 'BytesValue']);
function normalize(T, obj) {
  if (obj === null || typeof obj !== 'object') return obj;
  if (T.fullName === '.google.protobuf.Any' && obj['@type']) {
    const inner = root.lookupType(obj['@type'].replace(/^.*\//, ''));
    for (const k of Object.keys(obj)) if (k !== '@type') obj[k] = normalizeField(inner, k, obj[k]);
    return obj;
  }
  for (const k of Object.keys(obj)) obj[k] = normalizeField(T, k, obj[k]);
  return obj;
}
function normalizeField(T, k, v) {
  const f = T.fields[k];
  if (!f) throw new Error(T.fullName + ' has no field ' + k);
  f.resolve();
  const R = f.resolvedType;
  if (!R || !(R instanceof protobuf.Type)) return v;
  const one = (x) => {
    if (R.fullName.startsWith('.google.protobuf.') && WRAPPERS.has(R.name) && typeof x !== 'object') {
      return { value: x };
    }
    if (R.fullName === '.google.protobuf.Duration' && typeof x === 'string') {
      const m = x.match(/^(\d+)(?:\.(\d{1,9}))?s$/);
      if (!m) throw new Error(k + ': a duration is written "1.5s", not ' + JSON.stringify(x));
      return { seconds: Number(m[1]), nanos: m[2] ? Number(m[2].padEnd(9, '0')) : 0 };
    }
    return normalize(R, x);
  };
  if (f.repeated && Array.isArray(v)) return v.map(one);
  if (f.map && v && typeof v === 'object') {
    for (const mk of Object.keys(v)) v[mk] = one(v[mk]);
    return v;
  }
  return one(v);
}

function encode(kind, obj) {
  const T = root.lookupType(KINDS[kind]);
  const msg = T.fromObject(normalize(T, obj));
  const err = T.verify(msg);
  if (err) throw new Error(err);
  return Buffer.from(T.encode(msg).finish());
}

const state = {};
for (const k of Object.keys(KINDS)) state[k] = { version: 0, resources: new Map() };
const log = [];
const streams = new Set();
let streamSeq = 0;
let nonceSeq = 0;
let every = null; // --every

function send(st, kind) {
  const sub = st.subs.get(kind);
  if (!sub) return;
  const s = state[kind];
  const resources = [];
  for (const [name, bytes] of s.resources) {
    if (sub.wildcard || every === kind || sub.names.has(name)) {
      resources.push({ type_url: typeUrl(kind), value: bytes });
    }
  }
  const nonce = String(++nonceSeq);
  sub.sentVersion = s.version;
  sub.sentNonce = nonce;
  st.call.write({ version_info: String(s.version), resources, type_url: typeUrl(kind), nonce });
}

function onRequest(st, req) {
  if (req.node && req.node.id) st.node = req.node;
  const kind = kindOf(req.type_url);
  log.push({
    stream: st.id,
    type_url: req.type_url,
    version_info: req.version_info,
    response_nonce: req.response_nonce,
    resource_names: req.resource_names || [],
    error_detail: req.error_detail ? { code: req.error_detail.code, message: req.error_detail.message } : null,
    node_id: st.node ? st.node.id : '',
    zone: st.node && st.node.locality ? st.node.locality.zone : '',
    at_ns: String(process.hrtime.bigint()),
  });
  if (!kind) return;
  const names = req.resource_names || [];
  const wildcard = names.length === 0 && WILDCARD.has(kind);
  const old = st.subs.get(kind);
  const same = old && old.wildcard === wildcard && old.names.size === names.length &&
               names.every((n) => old.names.has(n));
  if (same) {
    // An ACK or a NACK of what was sent, or a repeat: answer only if the
    // resources changed since.
    if (old.sentVersion !== state[kind].version) send(st, kind);
    return;
  }
  st.subs.set(kind, { wildcard, names: new Set(names), sentVersion: -1, sentNonce: '' });
  send(st, kind);
}

function ads(call) {
  const st = { id: ++streamSeq, call, subs: new Map(), node: null };
  streams.add(st);
  call.on('data', (req) => {
    try {
      onRequest(st, req);
    } catch (e) {
      process.stderr.write('xds server: ' + e.stack + '\n');
    }
  });
  const end = () => {
    if (streams.delete(st)) call.end();
  };
  call.on('end', end);
  call.on('error', () => streams.delete(st));
  call.on('cancelled', () => streams.delete(st));
}

// Returns when the response went to the last stream that asked (process.hrtime,
// ns), or null.
function setResources(kind, list, merge) {
  const m = merge ? new Map(state[kind].resources) : new Map();
  for (const r of list) {
    const name = kind === 'endpoint' ? r.cluster_name : r.name;
    if (!name) throw new Error('a ' + kind + ' without a name');
    m.set(name, encode(kind, r));
  }
  state[kind].resources = m;
  state[kind].version++;
  let sent = null;
  for (const st of streams) {
    if (st.subs.has(kind)) {
      send(st, kind);
      sent = process.hrtime.bigint();
    }
  }
  return sent;
}

function control(req, res) {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    const reply = (code, obj) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(obj));
    };
    try {
      const m = req.url.match(/^\/resources\/(\w+)$/);
      if ((req.method === 'PUT' || req.method === 'PATCH') && m && KINDS[m[1]]) {
        const sent = setResources(m[1], JSON.parse(body), req.method === 'PATCH');
        return reply(200, { version: state[m[1]].version, sent_ns: sent === null ? null : String(sent) });
      }
      if (req.method === 'GET' && req.url === '/log') return reply(200, log);
      const lm = req.url.match(/^\/log\?since=(\d+)(&brief=1)?$/);
      if (req.method === 'GET' && lm) {
        const part = log.slice(Number(lm[1]));
        if (!lm[2]) return reply(200, part);
        return reply(200, part.map((e) => {
          const b = Object.assign({}, e, { n_resource_names: e.resource_names.length });
          delete b.resource_names;
          return b;
        }));
      }
      if (req.method === 'POST' && req.url === '/batch') {
        const out = [];
        for (const op of JSON.parse(body)) {
          if (!KINDS[op.kind] || (op.method !== 'PUT' && op.method !== 'PATCH')) {
            throw new Error('a batch step is {method: PUT | PATCH, kind, resources}');
          }
          const sent = setResources(op.kind, op.resources, op.method === 'PATCH');
          out.push({ version: state[op.kind].version, sent_ns: sent === null ? null : String(sent) });
        }
        return reply(200, out);
      }
      if (req.method === 'GET' && req.url === '/streams') return reply(200, { open: streams.size });
      return reply(404, { error: 'no such thing: ' + req.method + ' ' + req.url });
    } catch (e) {
      return reply(400, { error: String(e.message || e) });
    }
  });
}

function main() {
  const o = parseArgs(process.argv);
  every = o.every || null;
  const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs,
  });
  const proto = grpc.loadPackageDefinition(def);
  if (o.resources) {
    const initial = JSON.parse(fs.readFileSync(o.resources, 'utf8'));
    for (const kind of Object.keys(initial)) {
      if (!KINDS[kind]) throw new Error('--resources: no such kind: ' + kind);
      setResources(kind, initial[kind], false);
    }
  }
  const server = new grpc.Server();
  server.addService(proto.envoy.service.discovery.v3.AggregatedDiscoveryService.service, {
    StreamAggregatedResources: ads,
    DeltaAggregatedResources: (call) => call.emit('error', { code: grpc.status.UNIMPLEMENTED }),
  });
  let creds = grpc.ServerCredentials.createInsecure();
  if (o.tls_cert) {
    creds = grpc.ServerCredentials.createSsl(o.tls_ca ? fs.readFileSync(o.tls_ca) : null,
      [{ cert_chain: fs.readFileSync(o.tls_cert), private_key: fs.readFileSync(o.tls_key) }], !!o.tls_ca);
  }
  server.bindAsync(o.host + ':' + o.port, creds, (err, port) => {
    if (err) {
      process.stderr.write('xds server: ' + err.message + '\n');
      process.exit(1);
    }
    const h = http.createServer(control);
    h.listen(0, '127.0.0.1', () => {
      process.stdout.write(JSON.stringify({ ads_port: port, control_port: h.address().port }) + '\n');
    });
  });
  const stop = () => process.exit(0);
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
