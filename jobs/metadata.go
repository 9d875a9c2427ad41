package jobs

import (
	"strings"

	"github.com/batcherhq/batcher/batcher"
)

// MaxSpecMetadata bounds the entries of Spec.Metadata: a request's bound
// in the core.
const MaxSpecMetadata = batcher.MaxMetadataEntries

// ReservedMetadataPrefix starts the metadata keys that Batcher's own doors
// set on a job (the OpenAI Batch API keeps its endpoint and input file
// under batcher.openai.), in Spec.Tags: a caller's key under it would pass
// one kind of job off as another, so CheckMetadata refuses it.
const ReservedMetadataPrefix = "batcher."

// CheckMetadata is the rule on a job's metadata that every way to create a
// job applies (Manager.Begin applies it to Spec.Metadata, so none can skip
// it; a door calls it first to name the field as its caller sent it):
// batcher.CheckMetadata's bounds with at most maxEntries entries, and no
// key beginning with ReservedMetadataPrefix. It returns an ErrInvalid
// naming field and the limit, or nil; of several reserved keys it names
// the least.
func CheckMetadata(field string, md map[string]string, maxEntries int) error {
	if ve := batcher.CheckMetadata(field, md, maxEntries); ve != nil {
		return kindErr(ErrInvalid, "%s: %s", ve.Field, ve.Reason)
	}
	reserved, found := "", false
	for k := range md {
		if strings.HasPrefix(k, ReservedMetadataPrefix) && (!found || k < reserved) {
			reserved, found = k, true
		}
	}
	if found {
		return kindErr(ErrInvalid, "%s: key %q: keys beginning with %q are reserved for Batcher's own", field, cut(reserved), ReservedMetadataPrefix)
	}
	return nil
}
