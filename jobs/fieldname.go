package jobs

import (
	"errors"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/fieldname"
)

// spelled is err's message for an item's error line, with the bad field
// the core names (a *batcher.ValidationError) spelled as the item's caller
// wrote it: "body." and OpenAI's name for an OpenAI batch line (url is
// its endpoint), "request." and the proto's name for a CreateJob request
// (url empty), as the doors that take them one at a time name it.
func spelled(err error, url string) string {
	var ve *batcher.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	if url == "" {
		return "request." + fieldname.Proto(ve.Field) + ": " + ve.Reason
	}
	input := "messages"
	switch url {
	case URLCompletions:
		input = "prompt"
	case URLEmbeddings:
		input = "input"
	}
	return "body." + fieldname.OpenAI(ve.Field, input, "") + ": " + ve.Reason
}
