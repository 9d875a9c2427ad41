package openai

// GenAIProvider names the provider in gen_ai.provider.name on spans and
// metrics (batcher.ProviderNamer): "openai", the OpenTelemetry GenAI
// convention's value for the OpenAI API, which every OpenAI-compatible
// upstream speaks.
func (b *Backend) GenAIProvider() string { return "openai" }
