package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"

	"google.golang.org/grpc"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// Jobs calls the JobService: durable batch jobs. It is safe for concurrent
// use.
type Jobs struct {
	rpc      batcherv1.JobServiceClient
	callOpts []grpc.CallOption
}

// NewJobs returns a Jobs client over cc, which the caller keeps.
func NewJobs(cc grpc.ClientConnInterface, opts ...Option) *Jobs {
	c := &Client{}
	for _, o := range opts {
		o(c)
	}
	return &Jobs{rpc: batcherv1.NewJobServiceClient(cc), callOpts: c.callOpts}
}

// Chunk sizes of CreateJob's item messages.
const (
	jobChunkItems = 500
	jobChunkBytes = 1 << 20
	// MaxJSONLLine bounds one line of a JSONL input.
	MaxJSONLLine = 4 << 20
)

// CreateJob creates a job of spec and the requests items yields, sent in
// chunks so that a large job never travels in one message. An error items
// yields aborts the creation and is returned.
func (j *Jobs) CreateJob(ctx context.Context, spec *batcherv1.JobSpec, items iter.Seq2[*batcherv1.Request, error]) (*batcherv1.CreateJobResponse, error) {
	return j.create(ctx, spec, func(send func(*batcherv1.JobItems) error) error {
		chunk := &batcherv1.JobItems{}
		for req, err := range items {
			if err != nil {
				return err
			}
			chunk.Requests = append(chunk.Requests, req)
			if len(chunk.Requests) == jobChunkItems {
				if err := send(chunk); err != nil {
					return err
				}
				chunk = &batcherv1.JobItems{}
			}
		}
		if len(chunk.Requests) > 0 {
			return send(chunk)
		}
		return nil
	})
}

// CreateJobFromJSONL creates a job of spec from an OpenAI batch input file:
// one JSON object a line (custom_id, method, url, body), sent unchanged.
// Blank lines are skipped; a line the server cannot read becomes that
// item's error line.
func (j *Jobs) CreateJobFromJSONL(ctx context.Context, spec *batcherv1.JobSpec, r io.Reader) (*batcherv1.CreateJobResponse, error) {
	return j.create(ctx, spec, func(send func(*batcherv1.JobItems) error) error {
		br := bufio.NewReaderSize(r, 64<<10)
		chunk := &batcherv1.JobItems{}
		size := 0
		for n := 1; ; n++ {
			line, err := readLine(br)
			if len(bytes.TrimSpace(line)) > 0 {
				chunk.OpenaiLines = append(chunk.OpenaiLines, &batcherv1.OpenAIBatchLine{Line: line})
				size += len(line)
				if len(chunk.OpenaiLines) == jobChunkItems || size >= jobChunkBytes {
					if err := send(chunk); err != nil {
						return err
					}
					chunk, size = &batcherv1.JobItems{}, 0
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("client: JSONL line %d: %w", n, err)
			}
		}
		if len(chunk.OpenaiLines) > 0 {
			return send(chunk)
		}
		return nil
	})
}

// readLine returns the next line without its newline, at most MaxJSONLLine
// bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > MaxJSONLLine {
			return nil, fmt.Errorf("longer than %d bytes", MaxJSONLLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

func (j *Jobs) create(ctx context.Context, spec *batcherv1.JobSpec, items func(send func(*batcherv1.JobItems) error) error) (*batcherv1.CreateJobResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // an abandoned creation ends the RPC, and the server drops the job
	st, err := j.rpc.CreateJob(ctx, j.callOpts...)
	if err != nil {
		return nil, err
	}
	send := func(m *batcherv1.CreateJobRequest) error {
		if err := st.Send(m); err != nil {
			if errors.Is(err, io.EOF) { // the server ended the RPC: its status says why
				_, err = st.CloseAndRecv()
			}
			return err
		}
		return nil
	}
	if err := send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: spec}}); err != nil {
		return nil, err
	}
	if err := items(func(c *batcherv1.JobItems) error {
		return send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: c}})
	}); err != nil {
		return nil, err
	}
	return st.CloseAndRecv()
}

// Get returns a job with its progress.
func (j *Jobs) Get(ctx context.Context, id string) (*batcherv1.Job, error) {
	r, err := j.rpc.GetJob(ctx, &batcherv1.GetJobRequest{Id: id}, j.callOpts...)
	return r.GetJob(), err
}

// List returns the jobs in state (JOB_STATE_UNSPECIFIED: all), newest
// first, fetching pages as it goes.
func (j *Jobs) List(ctx context.Context, state batcherv1.JobState) iter.Seq2[*batcherv1.Job, error] {
	return func(yield func(*batcherv1.Job, error) bool) {
		token := ""
		for {
			page, err := j.rpc.ListJobs(ctx, &batcherv1.ListJobsRequest{State: state, PageToken: token}, j.callOpts...)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, job := range page.GetJobs() {
				if !yield(job, nil) {
					return
				}
			}
			if token = page.GetNextPageToken(); token == "" {
				return
			}
		}
	}
}

// Cancel cancels a job and returns it as it is now (CANCELLING).
func (j *Jobs) Cancel(ctx context.Context, id string) (*batcherv1.Job, error) {
	r, err := j.rpc.CancelJob(ctx, &batcherv1.CancelJobRequest{Id: id}, j.callOpts...)
	return r.GetJob(), err
}

// Delete removes a job's rows and files.
func (j *Jobs) Delete(ctx context.Context, id string) error {
	_, err := j.rpc.DeleteJob(ctx, &batcherv1.DeleteJobRequest{Id: id}, j.callOpts...)
	return err
}

// Watch calls f with the job's progress (at most once a second, and on
// every change of state) until the job ends, and returns the last
// progress. An error f returns stops the watch and is returned.
func (j *Jobs) Watch(ctx context.Context, id string, f func(*batcherv1.JobProgress) error) (*batcherv1.JobProgress, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := j.rpc.WatchJob(ctx, &batcherv1.WatchJobRequest{Id: id}, j.callOpts...)
	if err != nil {
		return nil, err
	}
	var last *batcherv1.JobProgress
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		last = r.GetProgress()
		if f != nil {
			if err := f(last); err != nil {
				return last, err
			}
		}
	}
}

// ResultsOption filters Results.
type ResultsOption func(*batcherv1.ListJobResultsRequest)

// Outcome keeps only the results of one outcome.
func Outcome(o batcherv1.ItemOutcome) ResultsOption {
	return func(r *batcherv1.ListJobResultsRequest) { r.Outcome = o }
}

// After resumes after a result's cursor.
func After(cursor string) ResultsOption {
	return func(r *batcherv1.ListJobResultsRequest) { r.Cursor = cursor }
}

// Results yields a job's finished items in item order. Stopping the loop
// ends the RPC.
func (j *Jobs) Results(ctx context.Context, id string, opts ...ResultsOption) iter.Seq2[*batcherv1.JobResult, error] {
	return func(yield func(*batcherv1.JobResult, error) bool) {
		req := &batcherv1.ListJobResultsRequest{Id: id}
		for _, o := range opts {
			o(req)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := j.rpc.ListJobResults(ctx, req, slices.Clone(j.callOpts)...)
		if err != nil {
			yield(nil, err)
			return
		}
		for {
			r, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(r.GetResult(), nil) {
				return
			}
		}
	}
}
