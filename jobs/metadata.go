package jobs

import (
	"fmt"
	"sort"

	"github.com/batcherhq/batcher/batcher"
)

// MaxSpecMetadata bounds the entries of Spec.Metadata.
const MaxSpecMetadata = 32

// checkMetadata checks a job's metadata against the bounds a request's
// metadata has in the core (and OpenAI's on a batch's): at most
// MaxSpecMetadata entries, keys of at most batcher.MaxMetadataKeyBytes
// bytes, values of at most batcher.MaxMetadataValBytes. It returns the
// field at fault and why, or "" when the metadata is within them.
func checkMetadata(md map[string]string) (field, reason string) {
	if len(md) > MaxSpecMetadata {
		return "spec.metadata", fmt.Sprintf("at most %d entries, got %d", MaxSpecMetadata, len(md))
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same key named on every try
	for _, k := range keys {
		if len(k) > batcher.MaxMetadataKeyBytes {
			return "spec.metadata", fmt.Sprintf("key %q: at most %d bytes, got %d", cut(k), batcher.MaxMetadataKeyBytes, len(k))
		}
		if v := md[k]; len(v) > batcher.MaxMetadataValBytes {
			return fmt.Sprintf("spec.metadata[%q]", k), fmt.Sprintf("at most %d bytes, got %d", batcher.MaxMetadataValBytes, len(v))
		}
	}
	return "", ""
}
