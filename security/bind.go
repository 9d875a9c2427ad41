package security

import (
	"fmt"
	"net"
	"strings"
)

// IsLoopback reports whether a listen address (host:port) binds to
// loopback only: "localhost" or a loopback IP. An empty host, an
// unspecified IP (0.0.0.0, ::) and any other host name bind further.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckBind refuses a listener on a non-loopback address that lacks TLS
// or authentication, unless insecure is set. name names the listener in
// the error ("listen", "http.listen"). Every listener should call it.
func CheckBind(name, addr string, tlsOn, authOn, insecure bool) error {
	if insecure || IsLoopback(addr) || (tlsOn && authOn) {
		return nil
	}
	var missing []string
	if !tlsOn {
		missing = append(missing, "TLS (--tls-cert and --tls-key)")
	}
	if !authOn {
		missing = append(missing, "authentication (--tenants, or a required client CA with --tls-client-ca)")
	}
	return fmt.Errorf("%s: %s is not a loopback address and the listener has no %s; "+
		"configure them, or pass --insecure to serve it so anyway", name, addr, strings.Join(missing, " and no "))
}
