package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
)

// Environment variables of the bearer token, below --token and --token-file.
const (
	tokenEnv     = "BATCHERCTL_TOKEN"
	tokenFileEnv = "BATCHERCTL_TOKEN_FILE"
)

// authFlags are --token and --token-file.
type authFlags struct {
	token, tokenFile string
}

// resolveToken returns the bearer token to send, or "" for none. The flags
// come first (they may not both be set), then $BATCHERCTL_TOKEN, then
// $BATCHERCTL_TOKEN_FILE. A token file holds the token on its first line;
// surrounding white space is ignored, and an empty file is an error (it is
// surely not what the user meant).
func (a *app) resolveToken() (string, error) {
	f := a.auth
	if f.token != "" && f.tokenFile != "" {
		return "", usageError("--token and --token-file: give one, not both")
	}
	switch {
	case f.token != "":
		return strings.TrimSpace(f.token), nil
	case f.tokenFile != "":
		return readTokenFile("--token-file", f.tokenFile)
	}
	if v, ok := a.env.lookupEnv(tokenEnv); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v), nil
	}
	if v, ok := a.env.lookupEnv(tokenFileEnv); ok && v != "" {
		return readTokenFile("$"+tokenFileEnv, v)
	}
	return "", nil
}

func readTokenFile(what, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	tok, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("%s: %s holds no token", what, path)
	}
	return tok, nil
}

// bearerToken sends "authorization: Bearer <token>" with every call.
type bearerToken struct {
	token string
	// secure: the connection is TLS, so gRPC may insist on it.
	secure bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is true over TLS. Plaintext is allowed only to a
// loopback address, which dialOptions checks before dialling.
func (b bearerToken) RequireTransportSecurity() bool { return b.secure }

// isLoopback reports whether addr (host:port) names this machine.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// unauthenticatedHint says what to check when the service answered
// UNAUTHENTICATED: that no token was sent, or that the one sent was
// refused.
func (a *app) unauthenticatedHint() string {
	if tok, err := a.resolveToken(); err == nil && tok != "" {
		return "the service refused the token sent: check that it is a current token of a tenant"
	}
	return "no token was sent, and the service wants one: give --token-file, --token, $" + tokenEnv + " or $" + tokenFileEnv
}
