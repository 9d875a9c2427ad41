package llmsim

import (
	"slices"
	"testing"

	"github.com/batcherhq/batcher/backend/openai/pack"
)

// TestParsePackedReadsTheClientsFormat checks llmsim's own reader against
// the client's writer: a format change on either side fails here.
func TestParsePackedReadsTheClientsFormat(t *testing.T) {
	items := []string{"one", "two\nlines", `"quoted" \ and ünïcode`}
	for _, budget := range []int{0, 40} {
		p, err := pack.Build("Be brief.", items, budget)
		if err != nil {
			t.Fatal(err)
		}
		if !isPackedSystem(p.System) {
			t.Fatalf("system %q: not recognised as packed", p.System)
		}
		got, gotBudget, err := parsePacked(p.User)
		if err != nil || !slices.Equal(got, items) || gotBudget != budget {
			t.Fatalf("parsePacked = %q, %d, %v; want %q, %d", got, gotBudget, err, items, budget)
		}
	}
	for _, bad := range []string{
		"", "hello", "Answer each of the following 2 requests.\n{\"id\":1,\"request\":\"a\"}",
		"Answer each of the following 1 requests.\n{\"id\":2,\"request\":\"a\"}",
		"Answer each of the following 1 requests, each in at most 0 tokens.\n{\"id\":1,\"request\":\"a\"}",
		"Answer each of the following 1 requests.\n{\"id\":1,\"request\":\"a\",\"x\":1}",
	} {
		if _, _, err := parsePacked(bad); err == nil {
			t.Errorf("parsePacked(%q): no error", bad)
		}
	}
}

func FuzzParsePacked(f *testing.F) {
	f.Add("Answer each of the following 1 requests.\n{\"id\":1,\"request\":\"a\"}")
	f.Add("Answer each of the following 2 requests, each in at most 5 tokens.\n{\"id\":1,\"request\":\"a\"}\n{\"id\":2,\"request\":\"b\"}")
	f.Add("Answer each of the following 99999999999999999999 requests.\n")
	f.Fuzz(func(t *testing.T, user string) {
		items, budget, err := parsePacked(user)
		if err != nil {
			return
		}
		if len(items) < 1 || len(items) > maxPackedItems || budget < 0 {
			t.Fatalf("accepted %d items, budget %d", len(items), budget)
		}
	})
}
