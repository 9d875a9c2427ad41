package client_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// flowControl is what a client connection told its server about its
// receive windows.
type flowControl struct {
	streamWindow uint32 // SETTINGS_INITIAL_WINDOW_SIZE (HTTP/2's default if unsent)
	connWindow   uint32 // the connection's window: 65535 plus its first WINDOW_UPDATE
	bdpPing      bool   // it pinged on receiving data (grpc-go's BDP estimation)
}

// TestDialFlowControl checks the windows a connection of Dial's announces,
// and whether it runs BDP estimation, by playing the service's side of
// HTTP/2 over a real socket for one Submit.
func TestDialFlowControl(t *testing.T) {
	const dflt = 65535 // HTTP/2's initial windows
	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
		want flowControl
	}{
		{"default", nil, flowControl{streamWindow: uint32(client.DefaultStreamWindow), connWindow: uint32(client.DefaultConnWindow)}},
		{"stream window overridden", []grpc.DialOption{grpc.WithInitialWindowSize(256 << 10)},
			flowControl{streamWindow: 256 << 10, connWindow: uint32(client.DefaultConnWindow)}},
		{"conn window overridden", []grpc.DialOption{grpc.WithInitialConnWindowSize(4 << 20)},
			flowControl{streamWindow: uint32(client.DefaultStreamWindow), connWindow: 4 << 20}},
		{"dynamic", []grpc.DialOption{client.WithDynamicWindows()}, flowControl{streamWindow: dflt, connWindow: dflt, bdpPing: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dialFlowControl(t, tc.opts...); got != tc.want {
				t.Errorf("flow control = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDialOptionsIsDials checks that a connection made with DialOptions
// and passed to New announces what Dial's does.
func TestDialOptionsIsDials(t *testing.T) {
	lis := listen(t)
	cc, err := grpc.NewClient(lis.Addr().String(), client.DialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	got := servePeer(t, lis, client.New(cc))
	want := flowControl{streamWindow: uint32(client.DefaultStreamWindow), connWindow: uint32(client.DefaultConnWindow)}
	if got != want {
		t.Errorf("flow control = %+v, want %+v", got, want)
	}
}

func listen(t *testing.T) net.Listener {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	return lis
}

func dialFlowControl(t *testing.T, opts ...grpc.DialOption) flowControl {
	lis := listen(t)
	c, err := client.Dial(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	return servePeer(t, lis, c)
}

// servePeer answers one Submit of c's on lis as an HTTP/2 server written
// by hand: its settings, the reply's headers and one DATA frame, then a
// PING of its own. It notes the client's windows, and whether the client
// pinged between receiving the data and acking the server's ping (grpc-go
// queues its BDP ping as it reads the data, before it reads the server's
// ping), then ends the RPC.
func servePeer(t *testing.T, lis net.Listener, c *client.Client) flowControl {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.Submit(t.Context(), client.Complete("m", "p"))
		done <- err
	}()
	conn, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(conn, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("client preface %q, %v", preface, err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fr.WriteSettings())
	fc := flowControl{streamWindow: 65535, connWindow: 65535}
	var stream uint32
	for stream == 0 { // the client's settings and window, up to its request's headers
		f, err := fr.ReadFrame()
		must(err)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					fc.streamWindow = v
				}
				must(fr.WriteSettingsAck())
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				fc.connWindow += f.Increment
			}
		case *http2.MetaHeadersFrame:
			stream = f.StreamID
		}
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	header := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i < len(fields); i += 2 {
			must(enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}))
		}
		return bytes.Clone(hb.Bytes())
	}
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, EndHeaders: true,
		BlockFragment: header(":status", "200", "content-type", "application/grpc")}))
	msg, err := proto.Marshal(&batcherv1.SubmitResponse{Completion: &batcherv1.Completion{Output: &batcherv1.Completion_Text{Text: "ok"}}})
	must(err)
	must(fr.WriteData(stream, false, binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))))
	must(fr.WriteData(stream, false, msg))
	ours := [8]byte{'b', 'a', 't', 'c', 'h', 'e', 'r', '!'}
	must(fr.WritePing(false, ours))
	for {
		f, err := fr.ReadFrame()
		must(err)
		if p, ok := f.(*http2.PingFrame); ok {
			if p.IsAck() && p.Data == ours {
				break
			}
			if !p.IsAck() {
				fc.bdpPing = true
			}
		}
	}
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, EndHeaders: true, EndStream: true,
		BlockFragment: header("grpc-status", "0")}))
	if err := <-done; err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return fc
}
