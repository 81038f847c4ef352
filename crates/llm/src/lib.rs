//! bork-ci's LLM providers: one `Provider` per vendor (OpenAI-compatible, Anthropic, Bedrock,
//! Vertex, Azure, scripted) behind one call. It depends on `bork-ci-core` only; the AWS and
//! Google crates are named here and nowhere else.
pub mod llm;
