'use strict';
// The OpenTelemetry JS SDK exporting known spans over OTLP/HTTP with
// protobuf bodies, the witness for the tests' OTLP receiver (otlp.py):
//
//   node export.js --url http://127.0.0.1:PORT/v1/traces
//
// makes three spans with fixed ids under one trace (a SERVER root, a CLIENT
// child with an ERROR status, an INTERNAL grandchild), exports them with
// @opentelemetry/exporter-trace-otlp-proto and prints, as one JSON line, what
// it made: [{trace_id, span_id, parent_span_id, name, kind, status_code,
// status_message, attributes}] (ids in hex, kind and status as OTLP's
// numbers). The receiver must decode exactly these. Exit 1 if the export
// failed.

const api = require('@opentelemetry/api');
const { BasicTracerProvider, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');
const { resourceFromAttributes } = require('@opentelemetry/resources');

const url = process.argv[process.argv.indexOf('--url') + 1];
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPANS = ['00f067aa0ba902b7', '1111111111111111', '2222222222222222'];
let next = 0;
const idGenerator = {
  generateTraceId: () => TRACE,
  generateSpanId: () => SPANS[next++],
};

const exporter = new OTLPTraceExporter({ url });
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'otel-witness' }),
  idGenerator,
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const tracer = provider.getTracer('maitred-tests', '1.0');
const made = [];
const KIND = { [api.SpanKind.INTERNAL]: 1, [api.SpanKind.SERVER]: 2, [api.SpanKind.CLIENT]: 3 };

function record(span, parent, name, kind, attrs, status) {
  const ctx = span.spanContext();
  made.push({
    trace_id: ctx.traceId, span_id: ctx.spanId, parent_span_id: parent || '', name,
    kind: KIND[kind], status_code: status ? status.code : 0, status_message: status ? status.message || '' : '',
    attributes: attrs,
  });
}

const root = tracer.startSpan('shop.Cart/Get', {
  kind: api.SpanKind.SERVER,
  attributes: { 'rpc.system': 'grpc', 'rpc.grpc.status_code': 0, 'maitred.hedge': false, 'x.ratio': 0.25 },
}, api.ROOT_CONTEXT);
const rootCtx = api.trace.setSpan(api.ROOT_CONTEXT, root);
const child = tracer.startSpan('shop.Cart/Get attempt', {
  kind: api.SpanKind.CLIENT, attributes: { 'server.address': '127.0.0.1', 'server.port': 5001 },
}, rootCtx);
child.setStatus({ code: api.SpanStatusCode.ERROR, message: 'UNAVAILABLE' });
const grand = tracer.startSpan('pick', { kind: api.SpanKind.INTERNAL, attributes: {} },
  api.trace.setSpan(rootCtx, child));
record(root, '', 'shop.Cart/Get', api.SpanKind.SERVER,
  { 'rpc.system': 'grpc', 'rpc.grpc.status_code': 0, 'maitred.hedge': false, 'x.ratio': 0.25 });
record(child, SPANS[0], 'shop.Cart/Get attempt', api.SpanKind.CLIENT,
  { 'server.address': '127.0.0.1', 'server.port': 5001 }, { code: 2, message: 'UNAVAILABLE' });
record(grand, SPANS[1], 'pick', api.SpanKind.INTERNAL, {});
grand.end();
child.end();
root.end();

provider.forceFlush().then(() => provider.shutdown()).then(() => {
  process.stdout.write(JSON.stringify(made) + '\n');
}, (e) => {
  process.stderr.write('export failed: ' + e + '\n');
  process.exit(1);
});
