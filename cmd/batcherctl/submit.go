package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// Operations of submit's --op.
const (
	opChat       = "chat"
	opCompletion = "completion"
	opEmbedding  = "embedding"
)

type submitFlags struct {
	model       string
	op          string
	system      string
	priority    string
	maxTokens   int32
	temperature float32
	setTemp     bool // --temperature was given: sent as it is, the service checks it
	id          string
	metadata    map[string]string
	stream      bool
	tools       string // a file of tools (submit_tools.go)
	toolChoice  string
	jsonSchema  string // a file holding a JSON Schema
	out         outputFormat
}

func newSubmitCmd(a *app) *cobra.Command {
	var f submitFlags
	c := &cobra.Command{
		Use:   "submit -m MODEL [flags] PROMPT...",
		Short: "Submit one prompt and print its completion",
		Long: `submit sends one request and prints its completion: the text of a chat or a
completion, the vector of an embedding as a JSON array. With -o json it
prints the whole Completion (usage, batch, timings) in protobuf JSON.

The prompt is the arguments joined by spaces, or standard input when there
are none or the only one is "-". The request waits in the service's batches
like any other; --priority URGENT sends it at once. With --stream the answer
is printed as the model generates it, token by token (chat and completion).

A refusal that says when to retry (RESOURCE_EXHAUSTED or UNAVAILABLE with a
RetryInfo: a tenant's rpm quota, a full queue) is sent again after the delay
it gives, up to 3 times in all, without --stream; so an over-quota submit
waits silently. --timeout bounds the wait: the refusal is then printed at
once.`,
		Example: `  batcherctl submit -m sim-chat "Write a haiku about queues"
  batcherctl submit -m sim-chat --system "Answer in French" --max-tokens 64 Hello
  echo "the quick brown fox" | batcherctl submit -m sim-embed --op embedding
  batcherctl submit -m sim-completion --op completion -p urgent -o json "Once upon a time"
  batcherctl submit -m sim-chat --stream "Tell me a story"
  batcherctl submit -m sim-chat --tools tools.json "What is the weather in Paris? Use get_weather."
  batcherctl submit -m sim-chat --json-schema person.json "Describe a person"`,
		Args: argsBetween(0, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSubmit(cmd, a, &f, args)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&f.model, "model", "m", "", "the route (model) to call, as the service names it (required)")
	fl.StringVar(&f.op, "op", opChat, "the operation: chat, completion or embedding; it must match the route's")
	fl.StringVar(&f.system, "system", "", "a system message before the prompt (chat only)")
	fl.StringVarP(&f.priority, "priority", "p", "", "urgent, high, normal, low or deferrable (default: normal)")
	fl.Int32Var(&f.maxTokens, "max-tokens", 0, "cap on generated tokens (default: the route's)")
	fl.Float32Var(&f.temperature, "temperature", 0, "sampling temperature, 0 to 2 (default: the provider's)")
	fl.StringVar(&f.id, "id", "", "the request's id (default: the service assigns one)")
	fl.StringToStringVar(&f.metadata, "metadata", nil, "metadata key=value pairs, echoed on the completion")
	fl.StringVar(&f.tools, "tools", "", "a JSON file of tools the model may call: an array of OpenAI tools or of {name, description, parameters} (chat only)")
	fl.StringVar(&f.toolChoice, "tool-choice", "", "the tool the model must call (needs --tools)")
	fl.StringVar(&f.jsonSchema, "json-schema", "", "a JSON file holding a JSON Schema the answer must follow strictly (chat only)")
	fl.BoolVar(&f.stream, "stream", false, "print the answer as it is generated (chat and completion); -o json prints the completion at the end")
	addOutputFlag(c, &f.out)
	return c
}

func runSubmit(cmd *cobra.Command, a *app, f *submitFlags, args []string) error {
	f.setTemp = cmd.Flags().Changed("temperature")
	if f.model == "" {
		return usageError("--model: required: the route (model) to call")
	}
	prompt := strings.Join(args, " ")
	if len(args) == 0 || (len(args) == 1 && args[0] == "-") {
		b, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return fmt.Errorf("reading the prompt from standard input: %w", err)
		}
		prompt = strings.TrimRight(string(b), "\r\n")
	}
	req, err := f.request(prompt)
	if err != nil {
		return err
	}
	conn, err := a.dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := a.callContext(cmd.Context())
	defer cancel()
	w := cmd.OutOrStdout()
	if f.stream {
		return submitStreamed(ctx, w, client.New(conn), req, f.out)
	}
	comp, err := client.New(conn).Submit(ctx, req)
	if comp == nil && err != nil {
		return rpcError("submit", err)
	}
	if f.out == outputJSON {
		if perr := printJSON(w, comp); perr != nil {
			return perr
		}
	} else if err == nil {
		if perr := printCompletion(w, comp); perr != nil {
			return perr
		}
	}
	if err != nil {
		return rpcError("submit: request "+comp.GetId(), err)
	}
	return nil
}

// request builds the request the flags describe.
func (f *submitFlags) request(prompt string) (*batcherv1.Request, error) {
	var opts []client.RequestOption
	if f.id != "" {
		opts = append(opts, client.WithID(f.id))
	}
	if f.priority != "" {
		p, err := parsePriority(f.priority)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithPriority(p))
	}
	if f.maxTokens != 0 {
		opts = append(opts, client.WithMaxTokens(f.maxTokens))
	}
	if f.setTemp {
		opts = append(opts, client.WithTemperature(f.temperature))
	}
	for k, v := range f.metadata {
		opts = append(opts, client.WithMetadata(k, v))
	}
	if f.system != "" && f.op != opChat {
		return nil, usageError("--system: only for --op chat")
	}
	// Checked here, not in chatOptions, which only a chat reaches: a
	// completion or an embedding would otherwise drop them unsaid.
	if (f.tools != "" || f.toolChoice != "" || f.jsonSchema != "") && f.op != opChat {
		return nil, usageError("--tools, --tool-choice and --json-schema: only for --op chat, got --op %s", f.op)
	}
	switch f.op {
	case opChat:
		var turns []client.RequestOption
		if f.system != "" {
			turns = append(turns, client.System(f.system))
		}
		rich, err := f.chatOptions()
		if err != nil {
			return nil, err
		}
		opts = append(opts, rich...)
		return client.Chat(f.model, append(append(turns, client.User(prompt)), opts...)...), nil
	case opCompletion:
		return client.Complete(f.model, prompt, opts...), nil
	case opEmbedding:
		return client.Embed(f.model, prompt, opts...), nil
	}
	return nil, usageError("--op: must be chat, completion or embedding, got %q", f.op)
}

// parsePriority reads a priority by its short name ("urgent") or its
// proto name ("PRIORITY_URGENT"), in any case.
func parsePriority(s string) (batcherv1.Priority, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "PRIORITY_") {
		name = "PRIORITY_" + name
	}
	if v, ok := batcherv1.Priority_value[name]; ok && v != int32(batcherv1.Priority_PRIORITY_UNSPECIFIED) {
		return batcherv1.Priority(v), nil
	}
	return 0, usageError("--priority: must be urgent, high, normal, low or deferrable, got %q", s)
}

// printCompletion prints a completion's output for people.
func printCompletion(w io.Writer, c *batcherv1.Completion) error {
	if e := c.GetEmbedding(); e != nil {
		b := []byte{'['}
		for i, v := range e.GetValues() {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
		}
		_, err := fmt.Fprintf(w, "%s]\n", b)
		return err
	}
	for _, tc := range c.GetMessage().GetToolCalls() {
		if _, err := fmt.Fprintf(w, "tool call %s %s(%s)\n", tc.GetId(), tc.GetName(), tc.GetArguments()); err != nil {
			return err
		}
	}
	if c.GetText() == "" && len(c.GetMessage().GetToolCalls()) > 0 {
		return nil
	}
	_, err := fmt.Fprintln(w, c.GetText())
	return err
}

// submitStreamed sends req with the SubmitStreamed RPC and prints its text
// as it comes (text output), or the completion at the end (-o json). A
// failure after some text ends the line and names the error.
func submitStreamed(ctx context.Context, w io.Writer, c *client.Client, req *batcherv1.Request, out outputFormat) error {
	wrote := false
	var werr error
	last := byte('\n') // the last byte written
	open := false      // a tool call's "(" is written, its ")" not yet
	emit := func(s string) {
		if s == "" || werr != nil {
			return
		}
		_, werr = io.WriteString(w, s)
		wrote, last = true, s[len(s)-1]
	}
	comp, err := c.SubmitStreamed(ctx, req, func(d *batcherv1.Delta) {
		if out == outputJSON {
			return
		}
		emit(d.GetText() + d.GetRefusal())
		// A tool call prints as printCompletion prints it, its arguments
		// as they come: tool call ID NAME(ARGUMENTS).
		for _, t := range d.GetToolCalls() {
			if t.GetId() != "" || t.GetName() != "" {
				if open {
					emit(")\n")
				} else if last != '\n' {
					emit("\n")
				}
				emit("tool call " + t.GetId() + " " + t.GetName() + "(")
				open = true
			}
			emit(t.GetArguments())
		}
	})
	if open {
		emit(")")
	}
	if werr != nil {
		return werr
	}
	if out == outputJSON && comp != nil {
		if perr := printJSON(w, comp); perr != nil {
			return perr
		}
	} else if wrote {
		if _, perr := io.WriteString(w, "\n"); perr != nil {
			return perr
		}
	}
	if err != nil {
		if comp == nil {
			return rpcError("submit", err)
		}
		return rpcError("submit: request "+comp.GetId(), err)
	}
	return nil
}
