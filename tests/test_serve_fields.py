"""Every protocol's 400 names its own field: a token limit of 0, one past the context, and
a prompt longer than the context, sent through each protocol to a real server, come back
naming `max_tokens` or `max_completion_tokens`, `max_output_tokens`, `n_predict`, and
`messages`, `prompt`, `input`, `input_prefix`: the field the client sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import QWEN_DRAFT, model_file

from harness.processes import ServeProcess, http, running

MODEL = QWEN_DRAFT  # a coder with FIM tokens: the same server answers /infill
CTX = 256
LONG = "word " * 400  # past CTX tokens in any protocol's rendering
ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    model_file(MODEL)
    with running(["--target", MODEL, "--draft", "none", "--ctx", str(CTX)]) as srv:
        yield srv


# (route, body with the limit at `{limit}` and the prompt text at `{text}`, the limit's field, the prompt's field)
CASES: dict[str, tuple[str, Any, str, str]] = {
    "chat": ("/v1/chat/completions", lambda n, text: {"messages": [{"role": "user", "content": text}],
                                                      "max_tokens": n}, "max_tokens", "messages"),
    "chat-max_completion_tokens": ("/v1/chat/completions", lambda n, text: {
        "messages": [{"role": "user", "content": text}], "max_completion_tokens": n}, "max_completion_tokens",
        "messages"),
    "completions": ("/v1/completions", lambda n, text: {"prompt": text, "max_tokens": n}, "max_tokens", "prompt"),
    "messages": ("/v1/messages", lambda n, text: {"messages": [{"role": "user", "content": text}], "max_tokens": n},
                 "max_tokens", "messages"),
    "responses": ("/v1/responses", lambda n, text: {"input": text, "max_output_tokens": n}, "max_output_tokens",
                  "input"),
    "infill": ("/infill", lambda n, text: {"input_prefix": text, "input_suffix": "\n", "n_predict": n}, "n_predict",
               "input_prefix"),
}


def _error(server: ServeProcess, path: str, body: dict[str, Any]) -> tuple[int, str | None, str]:
    """(status, param, message) in whichever shape the protocol answers errors."""
    status, _, raw = http("POST", server.base + path, {"model": MODEL, **body}, headers=ANTHROPIC
                          if path.startswith("/v1/messages") else None, timeout=120)
    error = json.loads(raw)["error"]
    return status, error.get("param"), error["message"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_400_names_the_field_as_the_protocol_calls_it(server: ServeProcess, case: str) -> None:
    path, body, limit, prompt = CASES[case]
    anthropic = path.startswith("/v1/messages")  # Anthropic's errors have no param: the message names it
    for n in (0, CTX + 1):  # below one, and past the context
        status, param, message = _error(server, path, body(n, "Say hi."))
        assert status == 400 and message.startswith(limit), (n, message)
        assert anthropic or param == limit, (n, param)
    status, param, message = _error(server, path, body(8, LONG))
    assert status == 400 and message.startswith(f"{prompt}: the prompt is"), message
    assert anthropic or param == prompt, param
    assert (param is None) == anthropic
