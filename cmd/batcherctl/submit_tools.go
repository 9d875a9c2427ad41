package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/batcherhq/batcher/client"
	"github.com/batcherhq/batcher/internal/jsonscan"
)

// chatOptions reads --tools, --tool-choice and --json-schema.
func (f *submitFlags) chatOptions() ([]client.RequestOption, error) {
	var opts []client.RequestOption
	if f.toolChoice != "" && f.tools == "" {
		return nil, usageError("--tool-choice: needs --tools")
	}
	if f.tools != "" {
		b, err := os.ReadFile(f.tools)
		if err != nil {
			return nil, fmt.Errorf("--tools: %w", err)
		}
		var list []struct {
			Function    *toolSpec       `json:"function"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			where := f.tools
			if line, col, ok := jsonscan.ErrorPosition(b, err); ok {
				where = fmt.Sprintf("%s:%d:%d", f.tools, line, col)
			}
			return nil, usageError("--tools: %s: want a JSON array of tools: %s", where, strings.TrimPrefix(err.Error(), "json: "))
		}
		for i, t := range list {
			spec := toolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
			if t.Function != nil { // OpenAI's shape
				spec = *t.Function
			}
			var params any
			if len(spec.Parameters) > 0 {
				params = spec.Parameters
			}
			tool, err := client.Tool(spec.Name, spec.Description, params)
			if err != nil {
				return nil, usageError("--tools: %s: tool %d: %v", f.tools, i, err)
			}
			tool.Strict = spec.Strict
			opts = append(opts, client.WithTools(tool))
		}
		if f.toolChoice != "" {
			opts = append(opts, client.WithToolChoice(f.toolChoice))
		}
	}
	if f.jsonSchema != "" {
		b, err := os.ReadFile(f.jsonSchema)
		if err != nil {
			return nil, fmt.Errorf("--json-schema: %w", err)
		}
		o, err := client.JSONSchema("response", json.RawMessage(b), true)
		if err != nil {
			return nil, usageError("--json-schema: %s: %v", f.jsonSchema, err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

type toolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}
