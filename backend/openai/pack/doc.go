// Package pack is the wire format of packed chat requests: several short,
// independent chat prompts sent to a model as one call, and its one reply
// that holds an answer for each.
//
// This is Batcher's "batch compiler" and "response router". Build writes the
// numbered prompt and the JSON schema of the reply; Parse reads the reply
// back into one Answer per item. The openai backend uses both; the llmsim
// simulator uses ParseRequest and Encode to answer packed prompts the way a
// model would.
//
// Guarantees:
//   - Parse never panics and always returns exactly n answers, each either a
//     non-blank Text or an Err (ErrMissing, ErrMalformed or ErrDuplicate), so
//     a caller can re-send the failed items singly;
//   - an answer is routed by its "id", never by its position, and an id given
//     twice is treated as unknown rather than guessed;
//   - a reply cut short (a model stopping at max_tokens) keeps every item
//     that was complete before the cut;
//   - Build and ParseRequest round-trip any item text, including newlines
//     and text that looks like the format itself.
package pack
