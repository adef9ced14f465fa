"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): Claude
Code runs on it. Bodies checked in `request`, answers, stream events, errors and the
model list shaped in `reply`."""

from specli.serve.protocols.anthropic_messages.reply import (
                        count_tokens_reply,
                        error,
                        events,
                        models_list,
                        whole,
)
from specli.serve.protocols.anthropic_messages.request import parse_messages
from specli.serve.protocols.base import WireProtocol

MESSAGES = WireProtocol("messages", "msg_", "/v1/messages", parse_messages, whole, events, error,
                        count_path="/v1/messages/count_tokens", count=lambda body: parse_messages(body, count_only=True),
                        count_reply=count_tokens_reply)

__all__ = ["MESSAGES", "models_list"]
