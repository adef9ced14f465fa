"""The loaded pair: resolved settings turned into loaded models, a drafter and prompt
tokens, and a server's slots over them.

- wiring: settings -> the loaded target and draft, the drafter, the context (`open_runtime`, `Runtime`)
- draft_choice: which draft model drafts for a target, or none, and why
- pair: can this draft model speculate for this target (llama.cpp's compatibility rules)
- prompting: prompt tokens from a conversation, through the chat template or as raw text
- slots: a server's n sequences of the loaded pair, each a Runtime of its own
- rounds: one llama_decode for every slot of a model at a time
- measure/: this machine's measured costs and how busy it is (calibration, first_use, load)
- kv/: conversations' KV state kept across requests and runs (prompt_cache, cache_files)
"""

from specli.runtime.wiring import (
    CALIBRATION_CONTEXT,
    CALIBRATION_TEXT,
    KV_BYTES,
    Runtime,
    fit_context,
    load_options,
    open_runtime,
)

__all__ = ["CALIBRATION_CONTEXT", "CALIBRATION_TEXT", "KV_BYTES", "Runtime", "fit_context", "load_options",
           "open_runtime"]
