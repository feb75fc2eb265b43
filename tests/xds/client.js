'use strict';
// A proxyless gRPC xDS client (@grpc/grpc-js-xds), the witness that
// tests/xds/server.js serves resources a real xDS client understands:
//
//   GRPC_XDS_BOOTSTRAP=FILE node client.js --target xds:///NAME --calls N [--timeout-ms T]
//                                          [--header NAME=VALUE] [--xds-creds]
//
// --xds-creds: XdsChannelCredentials (the clusters' UpstreamTlsContext and
// the bootstrap's certificate_providers decide TLS), plaintext otherwise.
//
// sends N unary maitred.testing.v1.Echo/Unary calls (with that request
// header, if given) through the xDS
// resolver and prints one JSON line: {"ok": n, "failed": {"CODE message": n},
// "instances": {"up1": n, ...}} (instances from the answers' "maitred-instance"
// header). Exits 0 whatever the calls did; the test reads the line.

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const grpcXds = require('@grpc/grpc-js-xds');
grpcXds.register();

function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : dflt;
}

const protos = path.join(__dirname, '..', '..', 'protos');
const def = protoLoader.loadSync('maitred/testing/v1/echo.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, includeDirs: [protos],
});
const Echo = grpc.loadPackageDefinition(def).maitred.testing.v1.Echo;

const target = arg('target');
const calls = Number(arg('calls', '10'));
const timeoutMs = Number(arg('timeout-ms', '10000'));
const header = arg('header', '');
const creds = process.argv.includes('--xds-creds')
  ? new grpcXds.XdsChannelCredentials(grpc.credentials.createInsecure())
  : grpc.credentials.createInsecure();
const client = new Echo(target, creds);
const out = { ok: 0, failed: {}, instances: {} };

function one(i) {
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    if (header) md.set(header.slice(0, header.indexOf('=')), header.slice(header.indexOf('=') + 1));
    const call = client.Unary({ call_id: 'xds-client-' + i }, md, { deadline: Date.now() + timeoutMs }, (err) => {
      if (err) {
        const k = grpc.status[err.code] + ' ' + err.details;
        out.failed[k] = (out.failed[k] || 0) + 1;
      } else {
        out.ok++;
      }
      resolve();
    });
    call.on('metadata', (md) => {
      const v = md.get('maitred-instance');
      if (v.length) out.instances[v[0]] = (out.instances[v[0]] || 0) + 1;
    });
  });
}

(async () => {
  for (let i = 0; i < calls; i++) await one(i);
  process.stdout.write(JSON.stringify(out) + '\n');
  client.close();
  process.exit(0);
})();
