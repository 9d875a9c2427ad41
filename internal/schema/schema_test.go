package schema

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	var c Cache
	s := []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`)
	if err := c.Validate(s, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{`{}`, `{"a":"x"}`, `{"a":1,"b":2}`, `[1]`} {
		if err := c.Validate(s, []byte(doc)); err == nil {
			t.Errorf("%s validated", doc)
		}
	}
	if err := c.Validate([]byte(`{"type":5}`), []byte(`{}`)); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("bad schema: %v", err)
	}
	if err := c.Validate([]byte(`{"$ref":"file:///etc/passwd"}`), []byte(`{}`)); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("external ref: %v", err)
	}
}
