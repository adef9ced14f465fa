"""OpenAI's chat completions (`POST /v1/chat/completions`) and completions (`POST
/v1/completions`, with `suffix`: fill in the middle): bodies checked in `request`,
answers, chunks and the model list shaped in `reply`."""

from specli.serve.protocols.base import WireProtocol
from specli.serve.protocols.openai_completions.reply import (
                    chat_response,
                    completion_response,
                    events,
                    models_list,
)
from specli.serve.protocols.openai_completions.request import parse_chat, parse_completion

CHAT = WireProtocol("chat", "chatcmpl-", "/v1/chat/completions", parse_chat, lambda ids, req, out: chat_response(ids, out),
                    events)
COMPLETIONS = WireProtocol("completion", "cmpl-", "/v1/completions", parse_completion,
                           lambda ids, req, out: completion_response(ids, out), events)

__all__ = ["CHAT", "COMPLETIONS", "models_list"]
