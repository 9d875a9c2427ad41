package batcher

import "github.com/batcherhq/batcher/internal/clip"

// CheckMetadata is the one rule on metadata, a request's or a job's, that
// every door applies: at most maxEntries entries (MaxMetadataEntries for a
// request; a door whose outside contract is tighter passes its own, as the
// OpenAI Batch API passes OpenAI's 16), keys of 1 to MaxMetadataKeyBytes
// bytes, values of at most MaxMetadataValBytes bytes. field names the
// metadata as the door's caller sent it ("metadata", "spec.metadata"). It
// returns a *ValidationError naming the field and the limit, or nil; of
// several bad keys it names the least, so that the answer is the same on
// every try.
func CheckMetadata(field string, md map[string]string, maxEntries int) *ValidationError {
	if len(md) > maxEntries {
		return invalid(field, "must hold at most %d entries, got %d", maxEntries, len(md))
	}
	if len(md) == 0 { // ranging even a nil map sets up an iterator
		return nil
	}
	bad, found := "", false
	for k, v := range md {
		if (k == "" || len(k) > MaxMetadataKeyBytes || len(v) > MaxMetadataValBytes) && (!found || k < bad) {
			bad, found = k, true
		}
	}
	switch {
	case !found:
		return nil
	case bad == "" || len(bad) > MaxMetadataKeyBytes:
		return invalid(field, "key %q: keys must be 1 to %d bytes, got %d", clip.String(bad), MaxMetadataKeyBytes, len(bad))
	default:
		return invalid(field+"["+clip.String(bad)+"]", "must be at most %d bytes, got %d", MaxMetadataValBytes, len(md[bad]))
	}
}
