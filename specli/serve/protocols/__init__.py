"""One package per protocol, each turning its requests into the one internal `Request`
and a job's neutral pushes into its own answers, frames and errors:

- openai_completions: OpenAI's chat completions and completions
- anthropic_messages: Anthropic's Messages API (Claude Code)
- openai_responses: OpenAI's Responses API (Codex CLI), with its stored responses
- llama_server: llama-server's /infill and helper routes

and what they share: `base` (the contract, `WireProtocol`), `fields` (field checks every
parser uses), `sse` (event framing and the one stream pump) and `reasoning` (a reasoning
model's thinking apart from its text). None of them imports the worker or the app."""
