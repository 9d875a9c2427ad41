package pack_test

import (
	"fmt"

	"github.com/batcherhq/batcher/backend/openai/pack"
)

func ExampleBuild() {
	p, err := pack.Build("Answer in one word.", []string{"Capital of France?", "Colour of the sky?"}, 16)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.User)
	// Output:
	// Answer each of the following 2 requests, each in at most 16 tokens.
	// {"id":1,"request":"Capital of France?"}
	// {"id":2,"request":"Colour of the sky?"}
}

func ExampleParse() {
	// A reply that answers item 2, garbles item 3 and forgets item 1.
	reply := "```json\n{\"answers\":[{\"id\":2,\"answer\":\"Blue\"},{\"id\":3,\"answer\":null}]}\n```"
	answers, err := pack.Parse(reply, 3)
	if err != nil {
		panic(err)
	}
	for i, a := range answers {
		if a.Err != nil {
			fmt.Printf("%d: re-send singly (%v)\n", i+1, a.Err)
			continue
		}
		fmt.Printf("%d: %s\n", i+1, a.Text)
	}
	// Output:
	// 1: re-send singly (pack: no answer for the item)
	// 2: Blue
	// 3: re-send singly (pack: malformed answer for the item)
}
