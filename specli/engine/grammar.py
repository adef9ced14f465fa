"""Constrained generation: a grammar masks the target's distribution at every position.

The grammar engine is llguidance (the one llama.cpp itself can use): no torch or
transformers behind it (xgrammar needs torch), JSON schema, GBNF, Lark, regex and
choice lists in one matcher, a token mask in ~20 us for Qwen2.5's 151,936 tokens on
this CPU, rollback for rejected drafts, and the forced ("fast-forward") tokens that the
grammar drafter drafts. It reads this model's own token bytes from the GGUF.

What is constrained: the target's logits row at each position, disallowed tokens set to
-inf before the sampler chain, so greedy takes the allowed argmax and sampling draws
from the masked, renormalised distribution. Verification sees only masked rows, so the
lossless statement holds for the constrained distribution.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import llguidance as llg
import numpy as np

from specli.errors import UsageError

GrammarKind = Literal["json_schema", "json_object", "gbnf", "regex", "choice", "lark"]

# Compact JSON (", " and ": ", no other whitespace): a schema's keys and punctuation are
# then forced bytes, and models write JSON this way. A schema's "x-guidance" overrides it.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
LABELS: dict[str, str] = {"json_schema": "JSON schema", "json_object": "JSON object", "gbnf": "GBNF grammar",
                          "regex": "regular expression", "choice": "choice list", "lark": "Lark grammar"}
HINTS: dict[str, str] = {
    "json_schema": "give a JSON Schema object (https://json-schema.org)",
    "json_object": "",
    "gbnf": "see llama.cpp's grammars/README.md for GBNF",
    "regex": "give a Rust-syntax regular expression",
    "choice": 'give a JSON list of strings, e.g. ["yes", "no"]',
    "lark": "see llguidance's docs/syntax.md for its Lark dialect",
}


@dataclass(frozen=True)
class Grammar:
    """A grammar as the user gave it; `compiled` is llguidance's form of it."""

    kind: GrammarKind
    source: str
    compiled: str
    # a lenient JSON schema's keywords the engine does not enforce (llguidance's warnings)
    unenforced: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return LABELS[self.kind]


def compile_grammar(kind: GrammarKind, source: str | dict[str, Any], lenient: bool = False) -> Grammar:
    """Check and compile a grammar; bad input raises UsageError (exit 2) naming the problem.
    `lenient` (a JSON schema): keywords the engine cannot enforce are left out of the
    constraint and named in `unenforced`, where otherwise they are refused."""
    text = source if isinstance(source, str) else json.dumps(source)
    label = LABELS[kind]
    options = {**JSON_OPTIONS, "lenient": True} if lenient else JSON_OPTIONS
    try:
        if kind == "json_object":
            compiled = llg.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)  # type: ignore[arg-type]
        elif kind == "json_schema":
            schema = json.loads(text)
            if not isinstance(schema, dict):
                raise UsageError(f"the JSON schema is a {type(schema).__name__}, not an object", HINTS[kind])
            compiled = llg.LLMatcher.grammar_from_json_schema(schema, defaults=options)  # type: ignore[arg-type]
        elif kind == "choice":
            choices = json.loads(text)
            if not (isinstance(choices, list) and choices and all(isinstance(o, str) for o in choices)):
                raise UsageError("the choice list is not a non-empty JSON list of strings", HINTS[kind])
            compiled = llg.grammar_from("choice", text)
        else:
            compiled = llg.grammar_from(kind, text)
    except json.JSONDecodeError as e:
        raise UsageError(f"the {label} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
                         HINTS[kind]) from None
    except ValueError as e:
        raise UsageError(f"the {label} is invalid: {_first_line(e)}", HINTS[kind]) from None
    failed, messages = llg.LLMatcher.validate_grammar_with_warnings(compiled)
    if failed:
        keywords = unenforceable(messages)
        if keywords:
            raise UsageError(f"the {label} uses {', '.join(keywords)}, which the grammar engine cannot enforce",
                             "leave the keyword out, or ask for a lenient schema (it is then checked after)")
        raise UsageError(f"the {label} is invalid: {_first_line(messages[0] if messages else 'no reason given')}",
                         HINTS[kind])
    return Grammar(kind, text, compiled, tuple(unenforceable(messages)) if lenient else ())


_UNIMPLEMENTED = re.compile(r'Unimplemented keys: \[(.*)\]')
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (.+)")


def unenforceable(messages: Sequence[str]) -> list[str]:
    """The keywords (and formats) llguidance's messages say it does not implement, each
    once: ['propertyNames', 'format "uri-reference"']."""
    found: list[str] = []
    for message in messages:
        for line in str(message).splitlines():
            if m := _UNIMPLEMENTED.search(line):
                found += [k.strip().strip('"') for k in m.group(1).split(",") if k.strip()]
            elif m := _UNKNOWN_FORMAT.search(line):
                found.append(f'format "{m.group(1).strip()}"')
    return list(dict.fromkeys(found))


def grammar_from_arg(kind: GrammarKind, value: str) -> Grammar:
    """A grammar from a command-line value: a file's path, or (a JSON schema) the JSON itself."""
    path = Path(value)
    if kind == "json_schema" and value.lstrip().startswith("{"):
        return compile_grammar(kind, value)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no {LABELS[kind]} file {value}", "give an existing file"
                         + (" or the schema's JSON itself" if kind == "json_schema" else "")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {value}: {_first_line(e)}", "give a readable UTF-8 text file") from None
    return compile_grammar(kind, text)


def _first_line(e: object) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


class GrammarModel(Protocol):
    """What a grammar needs of a model: its token bytes (specli.backend.Vocab)."""

    n_vocab: int

    def grammar_pieces(self) -> list[bytes]: ...

    def eog_tokens(self) -> list[int]: ...

    def tokenize_bytes(self, data: bytes) -> list[int]: ...


class _Wrapped:
    """llguidance's TokenizerWrapper input: token bytes, end tokens, a tokenize function."""

    bos_token_id = None

    def __init__(self, vocab: GrammarModel, eog: list[int]) -> None:
        self.tokens = vocab.grammar_pieces()
        self.eos_token_id = eog[0] if eog else 0
        self._tokenize = vocab.tokenize_bytes

    def __call__(self, data: bytes) -> list[int]:
        return self._tokenize(data)


_tokenizers: weakref.WeakKeyDictionary[Any, llg.LLTokenizer] = weakref.WeakKeyDictionary()


def tokenizer_for(vocab: GrammarModel) -> llg.LLTokenizer:
    """llguidance's tokenizer over this vocabulary (1.5 s for 151,936 tokens: built once
    per loaded model). Every end-of-generation token ends a complete grammar."""
    tok = _tokenizers.get(vocab)
    if tok is None:
        eog = vocab.eog_tokens()
        tok = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped(vocab, eog)), eos_token=eog)
        _tokenizers[vocab] = tok
    return tok


class _ByteVocab:
    """256 one-byte tokens and an end token: enough to check a text against a grammar
    without a model's vocabulary."""

    bos_token_id = None
    eos_token_id = 256
    tokens = [bytes([b]) for b in range(256)] + [b"<|end|>"]

    def __call__(self, data: bytes) -> list[int]:
        return list(data)


_byte_tokenizer: list[llg.LLTokenizer] = []


def accepts(grammar: Grammar, text: str) -> bool:
    """Whether `text` is a whole sentence of `grammar` (a JSON schema's: keys in the
    schema's order, compact separators; see JSON_OPTIONS)."""
    if not _byte_tokenizer:
        _byte_tokenizer.append(llg.LLTokenizer(llg.TokenizerWrapper(_ByteVocab())))
    matcher = llg.LLMatcher(_byte_tokenizer[0], grammar.compiled, log_level=0)
    return bool(matcher.consume_tokens(list(text.encode())) and matcher.is_accepting())


class Constraint:
    """One generation's grammar state. The matcher follows the emitted tokens; during
    verification it also walks the draft, row by row, and is put back after."""

    def __init__(self, grammar: Grammar, vocab: GrammarModel) -> None:
        self.grammar = grammar
        tokenizer = tokenizer_for(vocab)
        self._matcher = llg.LLMatcher(tokenizer, grammar.compiled, log_level=0)
        if self._matcher.is_error():
            raise UsageError(f"the {grammar.label} is invalid: {_first_line(self._matcher.get_error())}",
                             HINTS[grammar.kind])
        self.n_vocab = vocab.n_vocab
        # end the text: never consumed (a rollback would not count them); the tokenizer's
        # own list (a pass over the vocabulary took 60-100 ms a request)
        self._eog = frozenset(tokenizer.eos_tokens)
        self._bits = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)
        self._ahead: list[int] = []  # draft tokens consumed past the emitted ones

    @property
    def complete(self) -> bool:
        """The text so far is a whole sentence of the grammar."""
        return bool(self._matcher.is_accepting())

    @property
    def stopped(self) -> bool:
        """Nothing but an end-of-generation token may follow."""
        return bool(self._matcher.is_stopped())

    def ends(self, token: int) -> bool:
        """An end-of-generation token (never consumed by the matcher)."""
        return token in self._eog

    def forced(self) -> list[int]:
        """Tokens the grammar forces next (its fast-forward tokens: the canonical tokens of
        the bytes it forces, those that no later byte could merge with)."""
        return list(self._matcher.compute_ff_tokens())

    def forced_after(self, tokens: Sequence[int]) -> list[int]:
        """The tokens the grammar forces once `tokens` (valid, no end token) are emitted."""
        if not tokens or any(t in self._eog for t in tokens):
            return []
        self._matcher.consume_tokens(list(tokens))
        forced = list(self._matcher.compute_ff_tokens())
        self._matcher.rollback(len(tokens))
        return forced

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the current state, the grammar allows in a row."""
        return int(self._matcher.validate_tokens(list(tokens))) if tokens else 0

    def advance(self, tokens: Sequence[int]) -> None:
        """The generation emitted `tokens` (none drafted-ahead may be pending)."""
        if tokens and not self._matcher.consume_tokens(list(tokens)):
            raise UsageError(f"the grammar refused an emitted token: {self._matcher.get_error()}")

    def push(self, tokens: Sequence[int]) -> int:
        """Follow `tokens` ahead of the emitted text (a draft being built); returns how
        many the matcher took, for `pop`."""
        taken = [t for t in tokens if t not in self._eog]
        if taken:
            self._matcher.consume_tokens(taken)
        return len(taken)

    def pop(self, n: int) -> None:
        if n:
            self._matcher.rollback(n)

    def seek(self, draft: Sequence[int], i: int) -> None:
        """Put the matcher after the first i tokens of `draft` (valid for the grammar)."""
        want = [t for t in draft[:i] if t not in self._eog]
        if len(self._ahead) > len(want):
            self._matcher.rollback(len(self._ahead) - len(want))
            del self._ahead[len(want):]
        if len(self._ahead) < len(want):
            more = want[len(self._ahead):]
            self._matcher.consume_tokens(more)
            self._ahead += more

    def settle(self, emitted: Sequence[int]) -> None:
        """After verification: undo the draft walk, then follow what was emitted."""
        if self._ahead:
            self._matcher.rollback(len(self._ahead))
            self._ahead = []
        self.advance([t for t in emitted if t not in self._eog])

    def _mask(self) -> np.ndarray:
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        return self._bits

    def n_allowed(self) -> int:
        """How many tokens the grammar allows next."""
        return int(np.unpackbits(self._mask().view(np.uint8), count=self.n_vocab, bitorder="little").sum())

    def allowed(self, token: int) -> bool:
        bits = self._mask()
        return bool((int(bits[token >> 5]) >> (token & 31)) & 1)

    def argmax(self, row: np.ndarray) -> int:
        """The allowed token of highest logit (lowest index on ties): the row's argmax
        when allowed (a bit test), else one pass over the masked row."""
        best = int(row.argmax())
        if self.allowed(best):
            return best
        return int(self._masked(row, self._bits).argmax())

    def masked(self, row: np.ndarray) -> np.ndarray:
        """A copy of the row with disallowed tokens at -inf (the one vocabulary-sized copy)."""
        return self._masked(row, self._mask())

    def _masked(self, row: np.ndarray, bits: np.ndarray) -> np.ndarray:
        n = min(row.size, self.n_vocab)  # a draft model's rows may be cut to the shared vocabulary
        allowed = np.unpackbits(bits.view(np.uint8), count=n, bitorder="little").view(bool)
        if not allowed.any():
            raise UsageError(f"the grammar allows no token here: {self._matcher.get_error() or 'a dead end'}")
        return np.where(allowed, row[:n], np.float32(-np.inf))


class MaskedRows(Sequence[np.ndarray]):
    """Target rows under the grammar: row i is masked for the state after the draft's
    first i tokens; the matcher walks the draft only as far as verification reads."""

    def __init__(self, rows: Sequence[np.ndarray] | np.ndarray, constraint: Constraint, draft: Sequence[int]) -> None:
        self._rows, self._c, self._draft = rows, constraint, draft

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        self._c.seek(self._draft, i)
        return self._c.masked(self._rows[i])

    def argmax_at(self, i: int) -> int:
        self._c.seek(self._draft, i)
        return self._c.argmax(self._rows[i])
