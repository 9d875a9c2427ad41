package security

import (
	"math"
	"net"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of Limits.
const (
	DefaultMaxConnections       = 4096
	DefaultMaxConcurrentStreams = 1024
	DefaultMaxRecvMsgBytes      = 4 << 20 // gRPC's own default
	DefaultMaxSendMsgBytes      = 64 << 20
	DefaultHandshakeTimeout     = 10 * time.Second
	// DefaultMaxHeaderBytes bounds the headers of one request on every
	// listener (gRPC's HTTP/2 header list, the HTTP listeners' headers):
	// room for a JWT of MaxTokenBytes and trace headers, while a caller
	// that has not authenticated yet cannot make the process hold more.
	// grpc-go's own default is 16 MiB, net/http's 1 MiB.
	DefaultMaxHeaderBytes = 16 << 10
	// MinMaxHeaderBytes and MaxMaxHeaderBytes bound MaxHeaderBytes.
	MinMaxHeaderBytes = 4 << 10
	MaxMaxHeaderBytes = 16 << 20
	// DefaultKeepaliveMinTime is the shortest interval between a client's
	// pings that the server tolerates; a client pinging more often gets
	// GOAWAY (too_many_pings). gRPC's own default is 5 minutes.
	DefaultKeepaliveMinTime = 30 * time.Second
	DefaultKeepaliveTime    = 2 * time.Hour
	// DefaultMaxConnectionAge and DefaultMaxConnectionAgeGrace bound a
	// connection's life: after the age it gets a GOAWAY (new RPCs go to a
	// new connection, which authenticates again and may reach another
	// replica), and RPCs still open after the grace are closed. A revoked
	// credential ends its streams sooner (revoke.go); the age bounds what
	// no reload can see.
	DefaultMaxConnectionAge      = time.Hour
	DefaultMaxConnectionAgeGrace = 10 * time.Minute
	DefaultKeepaliveTimeout      = 20 * time.Second
	// MinWindowBytes is gRPC's smallest window; it ignores smaller ones.
	MinWindowBytes = 65535
)

// Limits bound what one client may hold of the gRPC listener. A zero field
// takes its default; see Validate for the allowed ranges.
type Limits struct {
	// MaxConnections bounds open connections; more wait in the kernel's
	// accept queue. Negative: no bound.
	MaxConnections int
	// MaxConcurrentStreams bounds one connection's concurrent RPCs; a
	// client's further RPCs wait for one to end.
	MaxConcurrentStreams int
	// MaxRecvMsgBytes and MaxSendMsgBytes bound one message.
	MaxRecvMsgBytes int
	MaxSendMsgBytes int
	// HandshakeTimeout bounds a new connection's TLS and HTTP/2 handshake.
	HandshakeTimeout time.Duration
	// MaxHeaderBytes bounds one request's headers, names and values, on
	// every listener: the gRPC server's MaxHeaderListSize, and the HTTP
	// listeners' http.Server.MaxHeaderBytes (HTTP/1.1 and HTTP/2). It is
	// checked before authentication; a request over it is refused (gRPC:
	// the stream is reset with RST_STREAM or the connection closed; HTTP:
	// 431) before its headers are held. Default DefaultMaxHeaderBytes;
	// MinMaxHeaderBytes to MaxMaxHeaderBytes.
	MaxHeaderBytes int
	// KeepaliveMinTime and KeepalivePermitWithoutStream are the ping
	// enforcement policy against ping floods.
	KeepaliveMinTime             time.Duration
	KeepalivePermitWithoutStream bool
	// KeepaliveTime and KeepaliveTimeout: the server pings an idle
	// connection after KeepaliveTime and closes it when no answer comes
	// within KeepaliveTimeout.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// MaxConnectionIdle closes a connection without RPCs for that long;
	// 0: never.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge sends a connection a GOAWAY once it is that old
	// (grpc-go adds up to 10% jitter), so that clients balancing over a
	// headless Service re-resolve and reach replicas added since they
	// connected, and no connection outlives the credential checks of a
	// new one for long. Default DefaultMaxConnectionAge; negative: never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long the RPCs open at the GOAWAY may go
	// on before the connection is closed under them (a stream cut so ends
	// UNAVAILABLE, and its accepted requests are cancelled). Default
	// DefaultMaxConnectionAgeGrace; negative: no deadline.
	MaxConnectionAgeGrace time.Duration
	// StreamWindowBytes and ConnWindowBytes, when set (at least
	// MinWindowBytes), fix the HTTP/2 receive windows of each stream and
	// each connection. 0: grpc-go's dynamic windows, which start at 64 KiB
	// and grow with the measured bandwidth-delay product up to 16 MiB. A
	// fixed stream window bounds what a caller may push on a stream the
	// server does not read, at the price of upload throughput on links
	// whose latency times bandwidth exceeds it.
	StreamWindowBytes int
	ConnWindowBytes   int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxConnections, DefaultMaxConnections)
	def(&l.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	def(&l.MaxRecvMsgBytes, DefaultMaxRecvMsgBytes)
	def(&l.MaxSendMsgBytes, DefaultMaxSendMsgBytes)
	defD(&l.HandshakeTimeout, DefaultHandshakeTimeout)
	def(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	defD(&l.KeepaliveMinTime, DefaultKeepaliveMinTime)
	defD(&l.KeepaliveTime, DefaultKeepaliveTime)
	defD(&l.KeepaliveTimeout, DefaultKeepaliveTimeout)
	defD(&l.MaxConnectionAge, DefaultMaxConnectionAge)
	defD(&l.MaxConnectionAgeGrace, DefaultMaxConnectionAgeGrace)
	return l
}

// serverOptions returns the gRPC server options that enforce l.
func (l Limits) serverOptions() []grpc.ServerOption {
	l = l.withDefaults()
	idle := l.MaxConnectionIdle
	if idle <= 0 {
		idle = time.Duration(math.MaxInt64)
	}
	age, grace := l.MaxConnectionAge, l.MaxConnectionAgeGrace
	if age < 0 {
		age = time.Duration(math.MaxInt64)
	}
	if grace < 0 {
		grace = time.Duration(math.MaxInt64)
	}
	streams := uint32(math.MaxUint32)
	if l.MaxConcurrentStreams > 0 {
		streams = uint32(min(l.MaxConcurrentStreams, math.MaxUint32))
	}
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: l.KeepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     idle,
			MaxConnectionAge:      age,
			MaxConnectionAgeGrace: grace,
			Time:                  l.KeepaliveTime,
			Timeout:               l.KeepaliveTimeout,
		}),
		grpc.MaxConcurrentStreams(streams),

		grpc.MaxRecvMsgSize(l.MaxRecvMsgBytes),
		grpc.MaxSendMsgSize(l.MaxSendMsgBytes),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.MaxHeaderListSize(uint32(min(max(l.MaxHeaderBytes, 1), MaxMaxHeaderBytes))),
	}
	if l.StreamWindowBytes > 0 {
		opts = append(opts, grpc.StaticStreamWindowSize(int32(min(max(l.StreamWindowBytes, MinWindowBytes), math.MaxInt32))))
	}
	if l.ConnWindowBytes > 0 {
		opts = append(opts, grpc.StaticConnWindowSize(int32(min(max(l.ConnWindowBytes, MinWindowBytes), math.MaxInt32))))
	}
	return opts
}

// listener bounds lis's open connections.
func (l Limits) listener(lis net.Listener) net.Listener {
	l = l.withDefaults()
	if l.MaxConnections < 0 {
		return lis
	}
	return netutil.LimitListener(lis, l.MaxConnections)
}
