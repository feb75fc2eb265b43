'use strict';
// An Echo backend on @grpc/grpc-js that reports its load with grpc-js's
// own ORCA support (1.14+): per call, the endpoint-load-metrics-bin
// trailer (the server option grpc.server_call_metric_recording and
// call.getMetricsRecorder()), and out of band, xds.service.orca.v3.
// OpenRcaService/StreamCoreMetrics (grpc.ServerMetricRecorder, which sends
// its report every report_interval the client asks for).
//
//   node orca_backend.js --name N --proto ECHO_PROTO_DIR --ready-file F
//        [--port P] [--cpu X --app X --qps X --eps X]      per-call report
//        [--oob-cpu X --oob-app X --oob-qps X --oob-eps X] out-of-band report
//        [--oob-raw HEX]   serve OpenRcaService by hand, sending these bytes
//                          as each report (a malformed one, say)
//        [--oob-pad N]     with --oob-raw: N bytes more in each, as an
//                          unknown field (15, LEN) after those bytes
//        [--oob-count N]   with --oob-raw: N reports, then silence (the
//                          stream kept open, as a hung peer's would be)
//        [--events F]      append "open <interval_ms>" / "close" per
//                          out-of-band stream
//        [--tls-cert F --tls-key F]  serve TLS (h2 by ALPN) instead of h2c
//
// Without --oob-* / --oob-raw the server has no OpenRcaService: grpc-js
// answers StreamCoreMetrics UNIMPLEMENTED. Writes its port to the ready
// file once it serves. Echo.Unary answers {instance: name}.

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function parseArgs(argv) {
  const o = {};
  for (let i = 2; i < argv.length; i += 2) o[argv[i].replace(/^--/, '').replace(/-/g, '_')] = argv[i + 1];
  return o;
}

const args = parseArgs(process.argv);
const num = (v) => (v === undefined ? undefined : Number(v));
const event = (line) => {
  if (args.events) fs.appendFileSync(args.events, line + '\n');
};

const echoDef = protoLoader.loadSync('maitred/testing/v1/echo.proto', {
  keepCase: true, longs: String, defaults: true, includeDirs: [args.proto],
});
const echo = grpc.loadPackageDefinition(echoDef).maitred.testing.v1.Echo;

const server = new grpc.Server({ 'grpc.server_call_metric_recording': 1 });

server.addService(echo.service, {
  Unary(call, cb) {
    const r = call.getMetricsRecorder();
    if (args.cpu !== undefined) r.recordCPUUtilizationMetric(num(args.cpu));
    if (args.app !== undefined) r.recordApplicationUtilizationMetric(num(args.app));
    if (args.qps !== undefined) r.recordQpsMetric(num(args.qps));
    if (args.eps !== undefined) r.recordEpsMetric(num(args.eps));
    cb(null, { instance: args.name });
  },
});

function intervalMs(req) {
  const d = req.report_interval;
  return d ? Number(d.seconds || 0) * 1000 + Math.round(Number(d.nanos || 0) / 1e6) : 30000;
}

if (args.oob_raw !== undefined) {
  // By hand: the response serializer passes the bytes through as they are.
  const orcaDef = protoLoader.loadSync('xds/service/orca/v3/orca.proto', {
    keepCase: true, longs: String, defaults: true, includeDirs: [args.proto],
  });
  const req = grpc.loadPackageDefinition(orcaDef).xds.service.orca.v3.OpenRcaService.service.StreamCoreMetrics;
  let raw = Buffer.from(args.oob_raw, 'hex');
  if (args.oob_pad !== undefined) {
    const pad = Number(args.oob_pad);
    const len = [];
    for (let v = pad; ; v = Math.floor(v / 128)) {
      if (v < 128) { len.push(v); break; }
      len.push((v % 128) | 128);
    }
    raw = Buffer.concat([raw, Buffer.from([(15 << 3) | 2, ...len]), Buffer.alloc(pad, 0x78)]);
  }
  const def = { StreamCoreMetrics: { ...req, responseSerialize: (b) => b, responseDeserialize: (b) => b } };
  server.addService(def, {
    StreamCoreMetrics(call) {
      const ms = intervalMs(call.request);
      event('open ' + ms);
      let sent = 0;
      const t = setInterval(() => {
        if (args.oob_count === undefined || sent++ < Number(args.oob_count)) call.write(raw);
      }, ms);
      call.on('cancelled', () => { clearInterval(t); event('close'); });
    },
  });
} else if (['oob_cpu', 'oob_app', 'oob_qps', 'oob_eps'].some((k) => args[k] !== undefined)) {
  const rec = new grpc.ServerMetricRecorder();
  if (args.oob_cpu !== undefined) rec.setCpuUtilizationMetric(num(args.oob_cpu));
  if (args.oob_app !== undefined) rec.setApplicationUtilizationMetric(num(args.oob_app));
  if (args.oob_qps !== undefined) rec.setQpsMetric(num(args.oob_qps));
  if (args.oob_eps !== undefined) rec.setEpsMetric(num(args.oob_eps));
  // grpc-js's handler as it is, wrapped only to log the stream's life for
  // the tests (serviceImplementation is not part of its typed API).
  const impl = rec.serviceImplementation;
  const stream = impl.StreamCoreMetrics;
  impl.StreamCoreMetrics = (call) => {
    event('open ' + intervalMs(call.request));
    call.on('cancelled', () => event('close'));
    stream(call);
  };
  rec.addToServer(server);
}

const creds = args.tls_cert
  ? grpc.ServerCredentials.createSsl(null, [{
    cert_chain: fs.readFileSync(args.tls_cert), private_key: fs.readFileSync(args.tls_key),
  }], false)
  : grpc.ServerCredentials.createInsecure();
server.bindAsync('127.0.0.1:' + (args.port || 0), creds, (err, port) => {
  if (err) {
    console.error(err.message);
    process.exit(1);
  }
  fs.writeFileSync(args.ready_file + '.tmp', String(port));
  fs.renameSync(args.ready_file + '.tmp', args.ready_file);
});

process.on('SIGTERM', () => server.forceShutdown() || process.exit(0));
