"""llama.cpp's own programs as a bench peer: `llama-completion` (plain decoding) and
`llama-speculative-simple` (its speculative decoding), built from the source that the
pinned llama-cpp-python vendors (scripts/build-llama-cpp.sh). They run as subprocesses on
the same prompt text (specli's chat template already applied), greedy, with the same
max tokens, threads and context; their own timing lines give prefill and decode time.

Pure parsing functions read those lines; `run_peer` starts the program.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specli.errors import UsageError

SPEC_TYPES = ("ngram-simple", "ngram-mod", "draft")
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


def parse_peer_spec(spec: str) -> tuple[str, int | None]:
    """`ngram-simple`, `ngram-mod` or `draft:k=N` -> (spec type, k)."""
    head, _, tail = spec.strip().partition(":")
    kind = head.strip().lower()
    if kind not in SPEC_TYPES:
        raise UsageError(f"unknown llama.cpp peer mode {spec!r}", "one of llama.cpp:ngram-simple, "
                         "llama.cpp:ngram-mod, llama.cpp:draft:k=N")
    k = None
    if tail.strip():
        key, eq, value = tail.partition("=")
        if kind != "draft" or key.strip().lower() not in ("k", "draft_max") or not eq or not value.strip().isdigit():
            raise UsageError(f"llama.cpp peer mode {spec!r}: only draft takes an option, k=N", "e.g. llama.cpp:draft:k=3")
        k = int(value)
    return kind, k


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
