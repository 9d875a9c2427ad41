package openaiapi

import (
	"net/http"
	"strings"

	"github.com/batcherhq/batcher/batcher"
)

// CacheHeader is set to "hit" on a response answered from the response
// cache (a single result; an array's items say so each in their own
// completion only on the gRPC API).
const CacheHeader = "X-Batcher-Cache"

// cacheMode reads the request's Cache-Control: no-store neither looks the
// response cache up nor stores the answer (batcher.CacheBypass); no-cache
// goes upstream and stores the fresh answer (batcher.CacheRefresh), as
// HTTP caches treat them. Other directives change nothing.
func cacheMode(h http.Header) batcher.CacheMode {
	mode := batcher.CacheAuto
	for _, v := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(d, "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "no-store":
				return batcher.CacheBypass
			case "no-cache":
				mode = batcher.CacheRefresh
			}
		}
	}
	return mode
}
