package client

import (
	"context"
	"slices"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Client calls a Batcher service. It is safe for concurrent use.
type Client struct {
	rpc         batcherv1.BatcherServiceClient
	callOpts    []grpc.CallOption
	maxAttempts int              // of Submit; see WithMaxAttempts
	conn        *grpc.ClientConn // set by Dial only; closed by Close
}

// Option configures a Client.
type Option func(*Client)

// WithCallOptions adds gRPC call options to every RPC the client makes
// (Submit and SubmitStream). Default: none.
func WithCallOptions(opts ...grpc.CallOption) Option {
	return func(c *Client) { c.callOpts = append(c.callOpts, opts...) }
}

// New returns a Client that calls the service over cc. The caller keeps
// ownership of cc: Close does not close it.
func New(cc grpc.ClientConnInterface, opts ...Option) *Client {
	c := &Client{rpc: batcherv1.NewBatcherServiceClient(cc), maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Close closes the connection Dial made. It does nothing for a Client made
// with New.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Submit sends one request and waits for its completion.
//
// A failure is a gRPC status error, as the service returns it: use
// status.Code or status.Convert on it. When the service answers with a
// completion whose error is set, Submit returns that completion together with
// the error its status describes.
//
// When the service answers RESOURCE_EXHAUSTED or UNAVAILABLE with a
// RetryInfo, Submit waits the delay it gives and sends the request again, up
// to WithMaxAttempts times in all, within ctx's deadline; the last answer is
// returned.
func (c *Client) Submit(ctx context.Context, req *batcherv1.Request, opts ...grpc.CallOption) (*batcherv1.Completion, error) {
	callOpts := slices.Concat(c.callOpts, opts)
	for attempt := 1; ; attempt++ {
		comp, err := c.submitOnce(ctx, req, callOpts)
		if attempt >= c.maxAttempts {
			return comp, err
		}
		d, ok := retryDelay(err)
		if !ok {
			return comp, err
		}
		if !waitRetry(ctx, d) {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return comp, err // the deadline comes before the delay is over
		}
	}
}

func (c *Client) submitOnce(ctx context.Context, req *batcherv1.Request, callOpts []grpc.CallOption) (*batcherv1.Completion, error) {
	resp, err := c.rpc.Submit(ctx, &batcherv1.SubmitRequest{Request: req}, callOpts...)
	if err != nil {
		return nil, err
	}
	comp := resp.GetCompletion()
	if comp == nil {
		return nil, status.Error(codes.Internal, "client: Submit response has no completion")
	}
	return comp, completionErr(comp)
}
