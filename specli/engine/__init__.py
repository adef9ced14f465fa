"""The engine: `core` runs the speculative loop on token ids and yields `Step`s;
`text` turns steps into text events (detokenizing, stop strings, segments by origin)."""

from specli.engine.core import (
    FINISH_CONTEXT,
    FINISH_LENGTH,
    FINISH_STOP,
    GenerationConfig,
    Rows,
    Step,
    Verifier,
    generate_steps,
    verify_step,
)
from specli.engine.text import GenerationResult, StepEvent, generate, run, stream_text

__all__ = [
    "FINISH_CONTEXT", "FINISH_LENGTH", "FINISH_STOP", "GenerationConfig", "GenerationResult", "Rows", "Step",
    "StepEvent", "Verifier", "generate", "generate_steps", "run", "stream_text", "verify_step",
]
