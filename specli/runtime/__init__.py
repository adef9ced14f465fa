"""Turns resolved settings into loaded models, a drafter and prompt tokens (`wiring`),
with this machine's measured costs (`calibration`), the draft model chosen for a target
(`draft_choice`), the draft/target pair check (`pair`) and prompts through the chat
template (`prompting`)."""

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
