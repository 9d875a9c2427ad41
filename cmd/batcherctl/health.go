package main

import (
	"fmt"

	"github.com/spf13/cobra"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func newHealthCmd(a *app) *cobra.Command {
	var (
		service string
		out     outputFormat
	)
	c := &cobra.Command{
		Use:   "health",
		Short: "Check the service's health",
		Long: `health asks the service's gRPC health check (grpc.health.v1.Health) and prints
its status: SERVING, or NOT_SERVING while it shuts down. It exits 1 unless the
status is SERVING, or when the service cannot be reached.`,
		Example: `  batcherctl health
  batcherctl health --service batcher.v1.BatcherService -o json
  until batcherctl health >/dev/null 2>&1; do sleep 0.2; done   # wait for a start`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := a.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := a.callContext(cmd.Context())
			defer cancel()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				return rpcError("health "+a.addr, err)
			}
			if out == outputJSON {
				if err := printJSON(cmd.OutOrStdout(), resp); err != nil {
					return err
				}
			} else if _, err := fmt.Fprintln(cmd.OutOrStdout(), resp.GetStatus()); err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	c.Flags().StringVar(&service, "service", "", `the service to check; "" is the whole server`)
	addOutputFlag(c, &out)
	return c
}
