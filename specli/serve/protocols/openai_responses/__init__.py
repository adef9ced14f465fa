"""OpenAI's Responses API (`POST /v1/responses`, `/v1/responses/input_tokens`, stored
responses under `/v1/responses/{id}`): Codex CLI runs on it. Bodies checked in `request`,
the response object and its stream's events in `reply`, stored responses in `store`."""

from specli.serve.protocols.openai_responses.reply import protocol
from specli.serve.protocols.openai_responses.routes import store_routes
from specli.serve.protocols.openai_responses.store import ResponseStore

__all__ = ["ResponseStore", "protocol", "store_routes"]
