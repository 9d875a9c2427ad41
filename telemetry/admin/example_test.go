package admin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/telemetry"
	"github.com/batcherhq/batcher/telemetry/admin"
)

// The admin handler over a sampler: the snapshot as JSON.
func Example() {
	s := telemetry.NewSampler(telemetry.Sources{
		Lanes:    func() []batcher.LaneStats { return nil },
		Backends: func() []batcher.BackendStats { return []batcher.BackendStats{{Name: "be", Limit: 4}} },
	}, time.Second, 0)
	s.Sample(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := admin.New(admin.Config{Sampler: s})
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	fmt.Print(resp.Status, " ", string(body))
	// Output: 200 OK ok
}
