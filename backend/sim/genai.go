package sim

// GenAIProvider names the provider in gen_ai.provider.name on spans and
// metrics (batcher.ProviderNamer).
func (p *Provider) GenAIProvider() string { return "batcher.sim" }
