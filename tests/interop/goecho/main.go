// goecho: a second gRPC implementation (grpc-go) on both sides of maitred.
//
//	goecho server -addr 127.0.0.1:PORT -name NAME
//	    Serves every method of every service: unary and streaming calls
//	    echo each request message back unchanged, with the request's
//	    "x-*" metadata as headers and trailers and "maitred-instance: NAME".
//	    A request whose metadata has "x-status: CODE" ends with that status
//	    and message "go says no".
//	goecho client -addr 127.0.0.1:PORT -calls N
//	    Unary and bidi-streaming calls through the address, checking
//	    payloads, metadata, trailers and statuses; prints a JSON summary and
//	    exits non-zero on the first mismatch.
//
// Messages are raw bytes (a pass-through codec), so no generated code is
// needed: maitred must carry them unchanged whatever they hold.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// Registered as "proto" so the content-type stays application/grpc(+proto).
func (rawCodec) Name() string { return "proto" }

func init() { encoding.RegisterCodec(rawCodec{}) }

func echoMetadata(md metadata.MD, name string) metadata.MD {
	out := metadata.Pairs("maitred-instance", name)
	for k, vs := range md {
		if strings.HasPrefix(k, "x-") {
			out[k] = append(out[k], vs...)
		}
	}
	return out
}

func serve(addr, name string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	handler := func(srv interface{}, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		out := echoMetadata(md, name)
		if err := stream.SendHeader(out); err != nil {
			return err
		}
		stream.SetTrailer(out)
		if v := md.Get("x-status"); len(v) > 0 {
			code, _ := strconv.Atoi(v[0])
			return status.Error(codes.Code(code), "go says no")
		}
		for {
			var msg []byte
			if err := stream.RecvMsg(&msg); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := stream.SendMsg(&msg); err != nil {
				return err
			}
		}
	}
	s := grpc.NewServer(grpc.UnknownServiceHandler(handler), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	fmt.Printf("goecho server %s listening on %s\n", name, lis.Addr())
	return s.Serve(lis)
}

type summary struct {
	Calls     int            `json:"calls"`
	Instances map[string]int `json:"instances"`
	Streams   int            `json:"streams"`
	Statuses  map[string]int `json:"statuses"`
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "goecho client: "+format+"\n", a...)
	os.Exit(1)
}

func client(addr string, calls int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, addr, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		fail("dial %s: %v", addr, err)
	}
	defer conn.Close()
	sum := summary{Instances: map[string]int{}, Statuses: map[string]int{}}
	method := "/maitred.testing.v1.Echo/Unary"
	for i := 0; i < calls; i++ {
		req := bytes.Repeat([]byte{byte(i)}, 1+i*97%5000)
		var resp []byte
		var hdr, trl metadata.MD
		octx := metadata.AppendToOutgoingContext(ctx, "x-call", strconv.Itoa(i), "x-bin-bin", string([]byte{0, 1, 2, 255}))
		if err := conn.Invoke(octx, method, &req, &resp, grpc.Header(&hdr), grpc.Trailer(&trl)); err != nil {
			fail("call %d: %v", i, err)
		}
		if !bytes.Equal(req, resp) {
			fail("call %d: payload of %d bytes came back as %d bytes", i, len(req), len(resp))
		}
		if got := trl.Get("x-call"); len(got) != 1 || got[0] != strconv.Itoa(i) {
			fail("call %d: trailer x-call = %v", i, got)
		}
		if got := hdr.Get("x-bin-bin"); len(got) != 1 || got[0] != string([]byte{0, 1, 2, 255}) {
			fail("call %d: binary header came back as %q", i, got)
		}
		inst := hdr.Get("maitred-instance")
		if len(inst) != 1 {
			fail("call %d: no maitred-instance header", i)
		}
		sum.Instances[inst[0]]++
		sum.Calls++
	}
	// Bidi: 50 messages, each echoed before the next is sent.
	desc := &grpc.StreamDesc{StreamName: "BidiStream", ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, "/maitred.testing.v1.Echo/BidiStream")
	if err != nil {
		fail("bidi: %v", err)
	}
	for i := 0; i < 50; i++ {
		msg := []byte(fmt.Sprintf("ping %d", i))
		if err := st.SendMsg(&msg); err != nil {
			fail("bidi send %d: %v", i, err)
		}
		var back []byte
		if err := st.RecvMsg(&back); err != nil {
			fail("bidi recv %d: %v", i, err)
		}
		if !bytes.Equal(msg, back) {
			fail("bidi %d: %q came back as %q", i, msg, back)
		}
	}
	if err := st.CloseSend(); err != nil {
		fail("bidi close: %v", err)
	}
	var extra []byte
	if err := st.RecvMsg(&extra); !errors.Is(err, io.EOF) {
		fail("bidi end: want EOF, got %v", err)
	}
	sum.Streams++
	// A status with a message, and a deadline maitred enforces.
	for _, code := range []codes.Code{codes.NotFound, codes.PermissionDenied} {
		var resp []byte
		req := []byte("x")
		octx := metadata.AppendToOutgoingContext(ctx, "x-status", strconv.Itoa(int(code)))
		err := conn.Invoke(octx, method, &req, &resp)
		s, _ := status.FromError(err)
		if s.Code() != code || s.Message() != "go says no" {
			fail("status: want %v \"go says no\", got %v %q", code, s.Code(), s.Message())
		}
		sum.Statuses[s.Code().String()]++
	}
	out, _ := json.Marshal(sum)
	fmt.Println(string(out))
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: goecho server|client [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address")
	name := fs.String("name", "go", "instance name (server)")
	calls := fs.Int("calls", 100, "unary calls (client)")
	fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "server":
		if err := serve(*addr, *name); err != nil {
			fail("%v", err)
		}
	case "client":
		client(*addr, *calls)
	default:
		fail("unknown mode %q", os.Args[1])
	}
}
