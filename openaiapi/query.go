package openaiapi

import (
	"maps"
	"net/url"
	"slices"
	"strings"
)

// ignoredParams are the query parameters every endpoint accepts and
// ignores. api-version names the version of the API's shape a client
// speaks: Azure OpenAI requires it, and the SDKs' Azure clients (and
// clients configured for Azure, pointed at another base URL) send it on
// every call. Batcher serves one shape, which the parameter cannot
// change, so reading it as a wish would refuse those clients for nothing.
// A parameter that could change an answer is never listed here: it is
// read, or refused by name.
var ignoredParams = []string{"api-version"}

// checkQuery reads the query raw of a call to endpoint ("GET /v1/files")
// that takes the parameters takes (none: a query is refused whole but for
// ignoredParams). A parameter the endpoint does not read is a 400 naming
// it, as an unknown field of a body is: a typo such as limt=5 would
// otherwise list the default page as if it had been read. Each parameter
// is given once.
func checkQuery(raw, endpoint string, takes ...string) (url.Values, *Error) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return vals, badRequest("", "malformed query string: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(vals)) {
		if !slices.Contains(takes, name) && !slices.Contains(ignoredParams, name) {
			return vals, badRequest(truncate(name), "unknown query parameter %q: %s %s", truncate(name), endpoint, takesList(takes))
		}
		if n := len(vals[name]); n > 1 {
			return vals, badRequest(name, "%s must be given once, got %d values", name, n)
		}
	}
	return vals, nil
}

// takesList says which query parameters an endpoint takes, for its errors.
func takesList(takes []string) string {
	ignored := " (" + strings.Join(ignoredParams, ", ") + " is accepted and ignored)"
	switch len(takes) {
	case 0:
		return "takes no query parameters" + ignored
	case 1:
		return "takes " + takes[0] + ignored
	}
	return "takes " + strings.Join(takes[:len(takes)-1], ", ") + " and " + takes[len(takes)-1] + ignored
}
