package bench

import (
	"os"
	"testing"

	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(simChildEnv) != "" {
		os.Exit(serveSimChild())
	}
	if os.Getenv(clientChildEnv) != "" {
		os.Exit(serveClientChild())
	}
	// Every server is built with no metrics unless its setup has them
	// (setup.build).
	otel.SetMeterProvider(metricnoop.NewMeterProvider())
	goleak.VerifyTestMain(m)
}
