// Package security is batcherd's transport security and caller identity:
// TLS and mTLS for every listener, with certificates that reload from their
// files without a restart; the gRPC limits that keep one client from
// holding the listener (connections, streams, message sizes, keepalive
// enforcement against ping floods); and authentication, on gRPC and over
// net/http with the same logic, that turns a bearer token, a JWT or a
// client certificate into a Tenant.
//
// # Guarantees
//
//   - Every TLS version served is 1.2 or later. The certificate, key and
//     client CA files are polled (size, modification time, inode) and on
//     SIGHUP (Security.Reload); a new set that fails to load is refused whole
//     and the old one keeps serving. Open connections keep their session;
//     new handshakes see the new certificate.
//   - Bearer tokens are stored in the tenants file as SHA-256 hashes, never
//     in plain text, and compared in constant time. JWTs must be signed with
//     an asymmetric algorithm by a key of the JWKS (a file, reloaded when it
//     changes, or a URL, cached and refreshed, and fetched again when a token
//     names an unknown key), unexpired, and match the configured issuer and
//     audience. A client certificate's SPIFFE ID (URI SAN) or subject maps
//     to a tenant.
//   - A missing or bad credential gets UNAUTHENTICATED (HTTP 401) with the
//     message "unauthenticated" and nothing more; the reason goes to the
//     debug log, never the credential. No error, log line or config dump of
//     this package holds a token, a token hash or a key.
//   - Without a tenants file every caller is the anonymous tenant, which may
//     do anything but use the admin right from an address other than
//     loopback (Tenant.AdminFrom): batcherd as it was before
//     authentication, less admin calls over a network --insecure opened.
//   - A tenants file that fails to parse is refused whole on reload; the
//     old tenants stay in force and the reason is logged. A request keeps
//     the Tenant it was admitted with.
//   - What a tenant may ask (routes, priority ceiling and mode, and the
//     name its quotas go by) is Tenant.Access, a batcher.Access: the core's
//     one admission rule, which every door calls on core types after it
//     translates its wire (server's Submit and SubmitStream, openaiapi,
//     the jobs creator for each item and each route of a job's spec). This
//     package reads no request message and rewrites none.
//
// Quotas, weights and the admin right are carried on the Tenant for the
// core, the jobs manager and the admin handlers to enforce; this package
// enforces none of them.
//
// # Use from other listeners
//
// One Security serves the whole process. A gRPC server takes
// GRPCServerOptions; an HTTP listener takes TLSConfig("h2", "http/1.1") for
// its http.Server and wraps its handler in HTTPMiddleware (and RequireAdmin
// for the admin API); every listener wraps its net.Listener with Listener
// and checks its address with CheckBind. Doors read AccessFrom(ctx) and
// call its Admit for every request.
package security
