"""The engine: the whole draft/verify step and its parts.

- `core`: the loop on token ids (prefill, then draft -> verify -> emit), yielding `Step`s;
- `prefill`, `drafting`, `verify`: its phases (`verify` holds the pure accept/reject rules);
- `sampling`: the sampler chain both sides share; `grammar`: masks and forced tokens;
- `clock`, `metrics`: the counters of one generation and the figures made from them;
- `text`, `stopstrings`: steps turned into text events, stop strings held back.
"""

from specli.engine.core import (
    FINISH_CONTEXT,
    FINISH_LENGTH,
    FINISH_STOP,
    GenerationConfig,
    Step,
    generate_steps,
)
from specli.engine.text import GenerationResult, StepEvent, generate, run, stream_text
from specli.engine.verify import Rows, Verifier, verify_step

__all__ = [
    "FINISH_CONTEXT", "FINISH_LENGTH", "FINISH_STOP", "GenerationConfig", "GenerationResult", "Rows", "Step",
    "StepEvent", "Verifier", "generate", "generate_steps", "run", "stream_text", "verify_step",
]
