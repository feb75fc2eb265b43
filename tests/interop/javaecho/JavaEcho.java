// JavaEcho: a third gRPC implementation (grpc-java on Netty, Debian's
// libgrpc-java) on both sides of maitred, in one JVM driven over
// stdin/stdout so a test class starts the JVM once.
//
// Each stdin line is a command, words "key=value" (binary values base64);
// each command prints exactly one JSON line on stdout ({"ok":true,...} or
// {"ok":false,"error":...}). Logs go to stderr.
//
//   serve name=N port=P       a grpc-java server answering maitred.testing.v1
//                             Echo's four methods under any service name
//   stopserver name=N
//   start id=I addr=H:P path=/svc/Method kind=unary|client|server|bidi
//         [timeout_ms=T] [compress=gzip] [md=KEY:B64 ...] [req=B64 ...]
//         [close=1]           a client call; its requests sent (compressed
//                             with compress=), half-closed when close=1
//   send id=I req=B64 | close id=I | cancel id=I
//   next id=I timeout_ms=T    the call's next response message
//   wait id=I timeout_ms=T    the call's end: status, headers, trailers,
//                             every response not taken by next
//   waitcall name=N call=C until=started|ended timeout_ms=T
//   release name=N call=C     what Control.WaitCall / Release do for
//                             tests/integration/upstream.py
//   quit
//
// Messages are bytes (a byte[] marshaller): the client sends what the test
// encoded; the server decodes EchoRequest and encodes EchoResponse by hand
// (echo.proto's field numbers) with protobuf-java's Coded streams, so no
// protoc step is needed. The server implements the subset of echo.proto
// the Java tests use: payload, call_id, response_count, delay_ms, hold,
// status (code, message, trailers), status_after, trailers_only,
// compress_response; its responses carry payload, instance, index,
// messages_received, bytes_received, call_id, time_remaining_s,
// request_payload_size and the request metadata, preceded by ":authority"
// as the server saw it.

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.CodedOutputStream;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.HandlerRegistry;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerMethodDefinition;
import io.grpc.Status;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.NettyServerBuilder;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

public final class JavaEcho {
    static final int MAX_MESSAGE = 64 << 20;
    static final long HOLD_LIMIT_MS = 120_000;

    static final MethodDescriptor.Marshaller<byte[]> BYTES = new MethodDescriptor.Marshaller<byte[]>() {
        @Override
        public InputStream stream(byte[] v) {
            return new ByteArrayInputStream(v);
        }

        @Override
        public byte[] parse(InputStream in) {
            try {
                return in.readAllBytes();
            } catch (IOException e) {
                throw Status.INTERNAL.withDescription("reading a message: " + e).withCause(e).asRuntimeException();
            }
        }
    };

    static MethodDescriptor<byte[], byte[]> method(String path, MethodDescriptor.MethodType type) {
        return MethodDescriptor.newBuilder(BYTES, BYTES).setType(type).setFullMethodName(path.substring(1)).build();
    }

    static MethodDescriptor.MethodType typeOf(String kind) {
        switch (kind) {
        case "unary":
        case "Unary":
            return MethodDescriptor.MethodType.UNARY;
        case "client":
        case "ClientStream":
            return MethodDescriptor.MethodType.CLIENT_STREAMING;
        case "server":
        case "ServerStream":
            return MethodDescriptor.MethodType.SERVER_STREAMING;
        default:
            return MethodDescriptor.MethodType.BIDI_STREAMING;
        }
    }

    // --- JSON out -----------------------------------------------------------
    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\')
                b.append('\\').append(c);
            else if (c < 0x20)
                b.append(String.format("\\u%04x", (int) c));
            else
                b.append(c);
        }
        return b.append('"').toString();
    }

    static String b64(byte[] v) {
        return Base64.getEncoder().encodeToString(v);
    }

    static String mdJson(Metadata md) {
        StringBuilder b = new StringBuilder("[");
        if (md != null) {
            for (String k : md.keys()) {
                Iterable<byte[]> vs = k.endsWith(Metadata.BINARY_HEADER_SUFFIX)
                        ? md.getAll(Metadata.Key.of(k, Metadata.BINARY_BYTE_MARSHALLER))
                        : asciiAll(md, k);
                for (byte[] v : vs) {
                    if (b.length() > 1)
                        b.append(',');
                    b.append('[').append(q(k)).append(',').append(q(b64(v))).append(']');
                }
            }
        }
        return b.append(']').toString();
    }

    static List<byte[]> asciiAll(Metadata md, String k) {
        List<byte[]> out = new ArrayList<>();
        Iterable<String> vs = md.getAll(Metadata.Key.of(k, Metadata.ASCII_STRING_MARSHALLER));
        if (vs != null)
            for (String v : vs)
                out.add(v.getBytes(StandardCharsets.ISO_8859_1));
        return out;
    }

    static void put(Metadata md, String k, byte[] v) {
        if (k.endsWith(Metadata.BINARY_HEADER_SUFFIX))
            md.put(Metadata.Key.of(k, Metadata.BINARY_BYTE_MARSHALLER), v);
        else
            md.put(Metadata.Key.of(k, Metadata.ASCII_STRING_MARSHALLER), new String(v, StandardCharsets.ISO_8859_1));
    }

    // --- echo.proto by hand -------------------------------------------------
    static final class Req {
        byte[] payload = new byte[0];
        String callId = "";
        int responseCount, delayMs, statusCode, statusAfter;
        boolean hold, trailersOnly, compressResponse;
        String statusMessage = "";
        List<String[]> trailers = new ArrayList<>(); // key, base64 value

        static Req parse(byte[] raw) throws IOException {
            Req r = new Req();
            CodedInputStream in = CodedInputStream.newInstance(raw);
            for (int tag; (tag = in.readTag()) != 0;) {
                switch (tag >>> 3) {
                case 1: r.payload = in.readByteArray(); break;
                case 3: r.callId = in.readString(); break;
                case 5: r.responseCount = in.readUInt32(); break;
                case 6: r.delayMs = in.readUInt32(); break;
                case 7: r.hold = in.readBool(); break;
                case 8: r.parseStatus(in.readByteArray()); break;
                case 9: r.statusAfter = in.readUInt32(); break;
                case 10: r.trailersOnly = in.readBool(); break;
                case 11: r.compressResponse = in.readBool(); break;
                default: in.skipField(tag);
                }
            }
            return r;
        }

        void parseStatus(byte[] raw) throws IOException {
            CodedInputStream in = CodedInputStream.newInstance(raw);
            for (int tag; (tag = in.readTag()) != 0;) {
                switch (tag >>> 3) {
                case 1: statusCode = in.readInt32(); break;
                case 2: statusMessage = in.readString(); break;
                case 3: {
                    CodedInputStream m = CodedInputStream.newInstance(in.readByteArray());
                    String k = "";
                    byte[] v = new byte[0];
                    for (int t; (t = m.readTag()) != 0;) {
                        if (t >>> 3 == 1) k = m.readString();
                        else if (t >>> 3 == 2) v = m.readByteArray();
                        else m.skipField(t);
                    }
                    trailers.add(new String[] {k, b64(v)});
                    break;
                }
                default: in.skipField(tag);
                }
            }
        }
    }

    static byte[] metadatum(String k, byte[] v) throws IOException {
        ByteArrayOutputStream bo = new ByteArrayOutputStream();
        CodedOutputStream o = CodedOutputStream.newInstance(bo);
        o.writeString(1, k);
        o.writeByteArray(2, v);
        o.flush();
        return bo.toByteArray();
    }

    // --- server ---------------------------------------------------------------
    /** One call as the server saw it (tracked by call_id, like upstream.py). */
    static final class Tracked {
        boolean started, ended, cancelled;
        int sent, received;
        boolean released;
    }

    static final class EchoServer {
        final String name;
        final Map<String, Tracked> calls = new HashMap<>();
        final ExecutorService pool = Executors.newCachedThreadPool();
        Server server;

        EchoServer(String name) {
            this.name = name;
        }

        synchronized Tracked get(String id) {
            return calls.computeIfAbsent(id, k -> new Tracked());
        }

        void start(int port) throws IOException {
            HandlerRegistry any = new HandlerRegistry() {
                @Override
                public ServerMethodDefinition<?, ?> lookupMethod(String fullName, String authority) {
                    String m = fullName.substring(fullName.lastIndexOf('/') + 1);
                    return ServerMethodDefinition.create(method("/" + fullName, typeOf(m)), handler);
                }
            };
            server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", port))
                             .fallbackHandlerRegistry(any)
                             .maxInboundMessageSize(MAX_MESSAGE)
                             .build()
                             .start();
        }

        final ServerCallHandler<byte[], byte[]> handler = (call, headers) -> {
            ServerSide s = new ServerSide(this, call, headers, Context.current().getDeadline());
            pool.execute(s::run);
            return s;
        };
    }

    /** A call's events go to a queue; one thread runs the echo logic. */
    static final class ServerSide extends ServerCall.Listener<byte[]> {
        static final Object HALF_CLOSE = new Object(), END = new Object();
        final EchoServer srv;
        final ServerCall<byte[], byte[]> call;
        final Metadata headers;
        final Deadline deadline;
        final LinkedBlockingQueue<Object> events = new LinkedBlockingQueue<>();
        final String kind;
        volatile boolean over;
        Tracked t = new Tracked();
        boolean halfClosed;
        int received;
        long bytes;

        ServerSide(EchoServer srv, ServerCall<byte[], byte[]> call, Metadata headers, Deadline deadline) {
            this.srv = srv;
            this.call = call;
            this.headers = headers;
            this.deadline = deadline;
            String full = call.getMethodDescriptor().getFullMethodName();
            this.kind = full.substring(full.lastIndexOf('/') + 1);
        }

        @Override
        public void onMessage(byte[] m) {
            events.add(m);
        }

        @Override
        public void onHalfClose() {
            events.add(HALF_CLOSE);
        }

        @Override
        public void onCancel() {
            end(true);
        }

        @Override
        public void onComplete() {
            end(false);
        }

        void end(boolean cancelled) {
            over = true;
            synchronized (srv) {
                t.ended = true;
                t.cancelled |= cancelled;
                srv.notifyAll();
            }
            events.add(END);
        }

        /** The next request, or null at half-close or the call's end. */
        Req next() throws InterruptedException, IOException {
            if (halfClosed || over)
                return null;
            call.request(1);
            Object e = events.take();
            if (e instanceof byte[]) {
                Req r = Req.parse((byte[]) e);
                received++;
                bytes += r.payload.length;
                synchronized (srv) {
                    t.received++;
                }
                return r;
            }
            if (e == HALF_CLOSE)
                halfClosed = true;
            return null;
        }

        /** Sleep ms, cut short when the call ends; false if it ended. */
        boolean pause(long ms) throws InterruptedException {
            long end = System.nanoTime() + ms * 1_000_000L;
            synchronized (srv) {
                while (!t.ended) {
                    long left = end - System.nanoTime();
                    if (left <= 0)
                        break;
                    TimeUnit.NANOSECONDS.timedWait(srv, left);
                }
                return !t.ended;
            }
        }

        boolean hold() throws InterruptedException {
            long end = System.nanoTime() + HOLD_LIMIT_MS * 1_000_000L;
            synchronized (srv) {
                while (!t.released && !t.ended) {
                    long left = (end - System.nanoTime()) / 1_000_000L;
                    if (left <= 0)
                        break;
                    srv.wait(left);
                }
                return t.released && !t.ended;
            }
        }

        Metadata echoMd() {
            Metadata out = new Metadata();
            for (String k : headers.keys())
                if (k.startsWith("x-"))
                    for (byte[] v : k.endsWith(Metadata.BINARY_HEADER_SUFFIX)
                                    ? headers.getAll(Metadata.Key.of(k, Metadata.BINARY_BYTE_MARSHALLER))
                                    : asciiAll(headers, k))
                        put(out, k, v);
            put(out, "maitred-instance", srv.name.getBytes(StandardCharsets.US_ASCII));
            return out;
        }

        byte[] response(Req r, int index) throws IOException {
            ByteArrayOutputStream bo = new ByteArrayOutputStream();
            CodedOutputStream o = CodedOutputStream.newInstance(bo);
            if (r.payload.length > 0) o.writeByteArray(1, r.payload);
            o.writeString(2, srv.name);
            if (index > 0) o.writeUInt32(3, index);
            o.writeUInt32(4, received);
            o.writeUInt64(5, bytes);
            if (!r.callId.isEmpty()) o.writeString(7, r.callId);
            o.writeDouble(8, deadline == null ? -1.0 : deadline.timeRemaining(TimeUnit.MICROSECONDS) / 1e6);
            String auth = call.getAuthority();
            o.writeByteArray(9, metadatum(":authority", (auth == null ? "" : auth).getBytes(StandardCharsets.UTF_8)));
            for (String k : headers.keys())
                for (byte[] v : k.endsWith(Metadata.BINARY_HEADER_SUFFIX)
                                ? headers.getAll(Metadata.Key.of(k, Metadata.BINARY_BYTE_MARSHALLER))
                                : asciiAll(headers, k))
                    o.writeByteArray(9, metadatum(k, v));
            o.writeUInt64(11, r.payload.length);
            o.flush();
            return bo.toByteArray();
        }

        void send(byte[] m) {
            call.sendMessage(m);
            synchronized (srv) {
                t.sent++;
            }
        }

        void finish(Req r, Metadata trailers) {
            if (over)
                return;
            for (String[] kv : r.trailers)
                put(trailers, kv[0], Base64.getDecoder().decode(kv[1]));
            call.close(Status.fromCodeValue(r.statusCode).withDescription(r.statusMessage), trailers);
        }

        void run() {
            try {
                serve();
            } catch (Exception e) {
                System.err.println("javaecho server " + srv.name + ": " + e);
                if (!over)
                    call.close(Status.INTERNAL.withDescription(e.toString()), new Metadata());
            }
        }

        void serve() throws Exception {
            Req first = next();
            if (first == null)
                first = new Req();
            if (!first.callId.isEmpty()) {
                Tracked tr = srv.get(first.callId);
                synchronized (srv) {
                    tr.started = true;
                    tr.received = t.received;
                    tr.ended = t.ended;
                    tr.cancelled = t.cancelled;
                    t = tr;
                    srv.notifyAll();
                }
                System.err.println("javaecho server " + srv.name + ": call " + first.callId + " " + kind + " started");
            }
            if (first.compressResponse) {
                call.setCompression("gzip");
                call.setMessageCompression(true);
            }
            if (!first.trailersOnly)
                call.sendHeaders(echoMd());
            if (first.hold && !hold())
                return;
            if (kind.equals("ClientStream")) {
                while (next() != null) {
                }
            }
            Req r = first;
            int index = 0;
            for (;;) {
                if (kind.equals("Unary") || kind.equals("ClientStream")) {
                    if (!pause(r.delayMs))
                        return;
                    if (r.statusCode == 0)
                        send(response(r, 0));
                    break;
                }
                int n = Math.max(r.responseCount, 1);
                for (int i = 0; i < n && (r.statusCode == 0 || i < r.statusAfter); i++) {
                    if (!pause(r.delayMs))
                        return;
                    send(response(r, index++));
                }
                if (r.statusCode != 0 || kind.equals("ServerStream"))
                    break;
                Req more = next();
                if (more == null)
                    break;
                r = more;
            }
            finish(r, echoMd());
        }
    }

    // --- client ---------------------------------------------------------------
    static final class ClientSide extends ClientCall.Listener<byte[]> {
        final LinkedBlockingQueue<byte[]> responses = new LinkedBlockingQueue<>();
        ClientCall<byte[], byte[]> call;
        Metadata headers, trailers;
        Status status;

        @Override
        public void onHeaders(Metadata h) {
            headers = h;
        }

        @Override
        public void onMessage(byte[] m) {
            responses.add(m);
            call.request(1);
        }

        @Override
        public synchronized void onClose(Status s, Metadata t) {
            status = s;
            trailers = t;
            notifyAll();
        }
    }

    final Map<String, EchoServer> servers = new ConcurrentHashMap<>();
    final Map<String, ManagedChannel> channels = new ConcurrentHashMap<>();
    final Map<String, ClientSide> calls = new ConcurrentHashMap<>();

    ManagedChannel channel(String addr) {
        return channels.computeIfAbsent(addr, a -> {
            int colon = a.lastIndexOf(':');
            return NettyChannelBuilder.forAddress(a.substring(0, colon), Integer.parseInt(a.substring(colon + 1)))
                    .usePlaintext()
                    .maxInboundMessageSize(MAX_MESSAGE)
                    .disableRetry()
                    .build();
        });
    }

    static Map<String, List<String>> words(String line) {
        Map<String, List<String>> w = new HashMap<>();
        String[] parts = line.trim().split(" +");
        for (int i = 1; i < parts.length; i++) {
            int eq = parts[i].indexOf('=');
            String k = eq < 0 ? parts[i] : parts[i].substring(0, eq);
            w.computeIfAbsent(k, x -> new ArrayList<>()).add(eq < 0 ? "" : parts[i].substring(eq + 1));
        }
        return w;
    }

    static String one(Map<String, List<String>> w, String k, String def) {
        List<String> v = w.get(k);
        if (v == null || v.isEmpty()) {
            if (def == null)
                throw new IllegalArgumentException("missing " + k + "=");
            return def;
        }
        return v.get(0);
    }

    static String callState(Tracked t, String id) {
        return String.format("{\"ok\":true,\"call\":%s,\"started\":%b,\"ended\":%b,\"cancelled\":%b,\"sent\":%d,\"received\":%d}",
                q(id), t.started, t.ended, t.cancelled, t.sent, t.received);
    }

    String handle(String line) throws Exception {
        String cmd = line.trim().split(" +")[0];
        Map<String, List<String>> w = words(line);
        long timeoutMs = Long.parseLong(one(w, "timeout_ms", "30000"));
        switch (cmd) {
        case "serve": {
            EchoServer s = new EchoServer(one(w, "name", null));
            s.start(Integer.parseInt(one(w, "port", "0")));
            servers.put(s.name, s);
            return "{\"ok\":true,\"port\":" + s.server.getPort() + "}";
        }
        case "stopserver": {
            EchoServer s = servers.remove(one(w, "name", null));
            s.server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
            s.pool.shutdownNow();
            return "{\"ok\":true}";
        }
        case "start": {
            String id = one(w, "id", null);
            MethodDescriptor<byte[], byte[]> m = method(one(w, "path", null), typeOf(one(w, "kind", "unary")));
            CallOptions opts = CallOptions.DEFAULT;
            if (w.containsKey("timeout_ms"))
                opts = opts.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS);
            if (w.containsKey("compress"))
                opts = opts.withCompression(one(w, "compress", null));
            Metadata md = new Metadata();
            for (String kv : w.getOrDefault("md", List.of())) {
                int colon = kv.indexOf(':');
                put(md, kv.substring(0, colon), Base64.getDecoder().decode(kv.substring(colon + 1)));
            }
            ClientSide c = new ClientSide();
            c.call = channel(one(w, "addr", null)).newCall(m, opts);
            calls.put(id, c);
            c.call.start(c, md);
            c.call.request(1);
            for (String r : w.getOrDefault("req", List.of()))
                c.call.sendMessage(Base64.getDecoder().decode(r));
            if (w.containsKey("close"))
                c.call.halfClose();
            return "{\"ok\":true}";
        }
        case "send":
            calls.get(one(w, "id", null)).call.sendMessage(Base64.getDecoder().decode(one(w, "req", null)));
            return "{\"ok\":true}";
        case "close":
            calls.get(one(w, "id", null)).call.halfClose();
            return "{\"ok\":true}";
        case "cancel":
            calls.get(one(w, "id", null)).call.cancel("cancelled by the test", null);
            return "{\"ok\":true}";
        case "next": {
            byte[] m = calls.get(one(w, "id", null)).responses.poll(timeoutMs, TimeUnit.MILLISECONDS);
            return m == null ? "{\"ok\":false,\"error\":\"no response within timeout_ms\"}"
                             : "{\"ok\":true,\"response\":" + q(b64(m)) + "}";
        }
        case "wait": {
            String id = one(w, "id", null);
            ClientSide c = calls.get(id);
            long end = System.nanoTime() + timeoutMs * 1_000_000L;
            synchronized (c) {
                while (c.status == null && System.nanoTime() < end)
                    c.wait(Math.max(1, (end - System.nanoTime()) / 1_000_000L));
                if (c.status == null)
                    return "{\"ok\":false,\"error\":\"call did not end within timeout_ms\"}";
            }
            calls.remove(id);
            StringBuilder rs = new StringBuilder("[");
            for (byte[] m; (m = c.responses.poll()) != null;)
                rs.append(rs.length() > 1 ? "," : "").append(q(b64(m)));
            return "{\"ok\":true,\"code\":" + q(c.status.getCode().name()) + ",\"message\":"
                    + q(c.status.getDescription() == null ? "" : c.status.getDescription())
                    + ",\"headers\":" + mdJson(c.headers) + ",\"trailers\":" + mdJson(c.trailers)
                    + ",\"responses\":" + rs + "]}";
        }
        case "waitcall": {
            EchoServer s = servers.get(one(w, "name", null));
            String id = one(w, "call", null);
            boolean ended = one(w, "until", "started").equals("ended");
            Tracked t = s.get(id);
            long end = System.nanoTime() + timeoutMs * 1_000_000L;
            synchronized (s) {
                while (!(ended ? t.ended : t.started) && System.nanoTime() < end)
                    s.wait(Math.max(1, (end - System.nanoTime()) / 1_000_000L));
                return callState(t, id);
            }
        }
        case "release": {
            EchoServer s = servers.get(one(w, "name", null));
            String id = one(w, "call", null);
            Tracked t = s.get(id);
            synchronized (s) {
                t.released = true;
                s.notifyAll();
                return callState(t, id);
            }
        }
        case "quit":
            return null;
        default:
            throw new IllegalArgumentException("unknown command " + cmd);
        }
    }

    public static void main(String[] args) throws Exception {
        JavaEcho j = new JavaEcho();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("{\"ok\":true,\"ready\":true}");
        System.out.flush();
        for (String line; (line = in.readLine()) != null;) {
            if (line.isBlank())
                continue;
            String out;
            try {
                out = j.handle(line);
            } catch (Exception e) {
                out = "{\"ok\":false,\"error\":" + q(e.toString()) + "}";
            }
            if (out == null)
                break;
            System.out.println(out);
            System.out.flush();
        }
        for (ManagedChannel ch : j.channels.values())
            ch.shutdownNow();
        for (EchoServer s : j.servers.values())
            s.server.shutdownNow();
        System.exit(0);
    }
}
