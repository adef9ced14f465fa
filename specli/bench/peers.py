"""Peers bench runs beside specli's modes, on the same prompts:

- llama.cpp's own programs: `llama-completion` (plain decoding) and
  `llama-speculative-simple` (its speculative decoding), built from the source that the
  pinned llama-cpp-python vendors (scripts/build-llama-cpp.sh). They run as subprocesses
  on the same prompt text (specli's chat template already applied), greedy, with the
  same max tokens, threads and context; their own timing lines give prefill and decode
  time. Pure parsing functions read those lines; `run_peer` starts the program.
- llama-cpp-python's own `Llama` with its prompt-lookup decoding, in-process.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specli import registry
from specli.bench.modes import Mode, parse_peer_spec
from specli.bench.records import first_difference, replay_proposals
from specli.engine.metrics import Counters
from specli.errors import UsageError
from specli.profiles import Settings
from specli.types import FinishReason

if TYPE_CHECKING:
    from specli.runtime import Runtime

BUILD_HINT = "build llama.cpp's programs once with scripts/build-llama-cpp.sh (about 5 minutes on 2 cores)"
TIMEOUT_S = 1800

_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_N_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
_N_ACCEPT = re.compile(r"n_accept\s*=\s*(\d+)")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"\s eval time =\s*([\d.]+) ms /\s*(\d+) runs")


@dataclass
class PeerRun:
    """What one llama.cpp run reported."""

    n_generated: int
    prefill_s: float
    decode_s: float  # after the prefill
    text: str = ""
    n_drafted: int = 0
    n_accepted: int = 0


def parse_speculative(stderr: str, stdout: str = "") -> PeerRun:
    """`llama-speculative-simple`'s summary: 'encoded N tokens in S seconds' (prefill),
    'decoded N tokens in S seconds' (everything after it: drafting, verifying, sampling)."""
    enc, dec = _ENCODED.search(stderr), _DECODED.search(stderr)
    if enc is None or dec is None:
        raise ValueError("no 'encoded ... decoded ...' summary in llama-speculative-simple's output")
    drafted, accepted = _N_DRAFTED.search(stderr), _N_ACCEPT.search(stderr)
    return PeerRun(int(dec.group(1)), float(enc.group(2)), float(dec.group(2)), stdout,
                   int(drafted.group(1)) if drafted else 0, int(accepted.group(1)) if accepted else 0)


def parse_completion(stderr: str, stdout: str = "") -> PeerRun:
    """`llama-completion`'s perf lines: 'prompt eval time = X ms / N tokens' (prefill) and
    'eval time = X ms / R runs' (one run per token after the first)."""
    prompt, gen = _PROMPT_EVAL.search(stderr), _EVAL.search(stderr)
    if prompt is None or gen is None:
        raise ValueError("no 'prompt eval time' / 'eval time' lines in llama-completion's output")
    return PeerRun(int(gen.group(2)) + 1, float(prompt.group(1)) / 1000, float(gen.group(1)) / 1000, stdout)


def binaries_dir(version: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("SPECLI_LLAMA_CPP_BIN") or Path(base) / "specli" / "llama.cpp" / version / "bin")


def find_binaries(version: str) -> Path:
    d = binaries_dir(version)
    for name in ("llama-completion", "llama-speculative-simple"):
        if not os.access(d / name, os.X_OK):
            raise UsageError(f"llama.cpp's {name} is not built ({d / name} missing)", BUILD_HINT)
    return d


def command_line(bin_dir: Path, kind: str | None, model: Path, prompt: str, max_tokens: int, threads: int,
                 ctx: int, draft: Path | None = None, k: int | None = None, temperature: float = 0.0,
                 seed: int | None = None) -> list[str]:
    """The argv of one run; kind None = llama-completion (plain decoding)."""
    common = ["-m", str(model), "-p", prompt, "--no-escape", "-n", str(max_tokens), "-t", str(threads),
              "-c", str(ctx), "--temp", str(temperature)]
    if seed is not None:
        common += ["-s", str(seed)]
    if kind is None:
        return [str(bin_dir / "llama-completion"), *common, "-no-cnv", "--no-display-prompt"]
    args = [str(bin_dir / "llama-speculative-simple"), *common]
    if kind == "draft":
        if draft is None:
            raise UsageError("llama.cpp:draft needs a draft model", "set --draft NAME")
        return [*args, "--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(k or 3)]
    return [*args, "--spec-type", kind]


def run_peer(argv: list[str]) -> PeerRun:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False)
    except OSError as e:
        raise UsageError(f"cannot run {argv[0]}: {e.strerror or e}", BUILD_HINT) from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{Path(argv[0]).name} did not finish within {TIMEOUT_S} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{Path(argv[0]).name} failed (exit {proc.returncode}): {tail}")
    parse = parse_completion if argv[0].endswith("llama-completion") else parse_speculative
    try:
        return parse(proc.stderr, proc.stdout)
    except ValueError as e:
        raise UsageError(f"{Path(argv[0]).name}: {e}") from None


@dataclass
class Generated:
    """What one generation produced, before it becomes a record."""

    tokens: list[int]
    text: str
    finish_reason: FinishReason | None
    counters: Counters
    margins: list[tuple[int, float]] | None = None  # the baseline's runner-up and logit gap per token
    contenders: list[dict[int, float]] | None = None  # the baseline's next likeliest tokens and gaps
    no_tokens: bool = False  # a peer that reports text only: nothing to compare token by token


def llama_cpp_bin() -> Path:
    """The directory of llama.cpp's programs built for the installed llama-cpp-python."""
    return find_binaries(importlib.metadata.version("llama_cpp_python"))


def prompt_text(rt: Runtime, tokens: list[int]) -> str:
    """The prompt as text with special tokens spelled out, as llama.cpp parses it."""
    return rt.target.vocab.detokenize(tokens, special=True)


def generate_llama_cpp(mode: Mode, s: Settings, rt: Runtime, tokens: list[int], max_tokens: int) -> Generated:
    """One run of llama.cpp's own program on the same prompt text; its timing lines
    give prefill and decode time. Token ids are not reported: the text only."""
    from specli.backend import default_threads

    kind, k = parse_peer_spec(mode.spec) if mode.spec else (None, None)
    draft = rt.draft.path if kind == "draft" and rt.draft is not None and not rt.cross else None
    argv = command_line(
        llama_cpp_bin(), kind, registry.resolve(s.target), prompt_text(rt, tokens), max_tokens,
        s.threads or default_threads(), rt.target.n_ctx, draft, k, s.temperature, s.seed)
    run = run_peer(argv)
    c = Counters(n_prompt=len(tokens), n_generated=run.n_generated, n_drafted=run.n_drafted,
                 n_accepted=run.n_accepted, t_prefill=run.prefill_s, t_first_token=run.prefill_s,
                 t_verify=run.decode_s, t_total=run.prefill_s + run.decode_s,
                 t_llama=run.prefill_s + run.decode_s)  # Python overhead: none (a C++ program)
    finish: FinishReason = "length" if run.n_generated >= max_tokens else "stop"
    return Generated([], run.text, finish, c, no_tokens=True)


class LlamaCppPythonPeer:
    """llama-cpp-python's `Llama` with its prompt-lookup decoding, loaded beside
    specli's models (`--peer llama-cpp-python`); its drafts are replayed into counters."""

    def __init__(self, s: Settings, name: str, rt: Runtime) -> None:
        from specli.backend import open_llama_cpp_python_peer
        from specli.runtime import load_options

        self.name, self.rt = name, rt
        self.llm = open_llama_cpp_python_peer(
            registry.resolve(s.target), load_options(s, for_draft=False),
            num_pred_tokens=s.draft_max, max_ngram_size=s.ngram_max,
        )
        self._cached: list[int] = []  # what its KV cache holds, as far as we know

    def generate(self, s: Settings, tokens: list[int], keep_cache: bool, max_tokens: int) -> Generated:
        llm = self.llm
        c = Counters(n_prompt=len(tokens))
        if keep_cache:  # llama-cpp-python reuses the longest cached prefix (all but the last token at most)
            diff = first_difference(self._cached, tokens)
            c.n_prompt_reused = min(len(tokens) if diff is None else diff, len(tokens) - 1)
        llama0, draft0 = llm.decode_seconds, llm.draft_seconds
        out: list[int] = []
        t0 = time.perf_counter()
        for tok in llm.stream(tokens, max_tokens, s.sampling(), keep_cache):
            out.append(tok)
            if c.t_first_token is None:
                c.t_first_token = time.perf_counter() - t0
        c.t_total = time.perf_counter() - t0
        if c.t_first_token is None:
            c.t_first_token = c.t_total
        c.t_prefill = c.t_first_token
        c.t_draft = llm.draft_seconds - draft0
        c.t_verify = max(0.0, c.t_total - c.t_prefill - c.t_draft)
        c.t_llama = llm.decode_seconds - llama0
        c.n_generated = len(out)
        replay_proposals(c, out, llm.proposals, name=self.name)
        self._cached = [*tokens, *out]
        finish: FinishReason = "length" if len(out) >= max_tokens else "stop"
        return Generated(out, self.rt.target.detokenize(out), finish, c)

    def close(self) -> None:
        self.llm.close()
