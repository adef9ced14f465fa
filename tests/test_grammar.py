"""Constrained generation with real models: outputs follow their grammar, greedy output
equals masked plain decoding, sampling follows the masked target distribution."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from conftest import SMOL
from conftest import total_variation as tv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from specli.backend import Model
from specli.cli import app
from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.ngram import NgramDrafter
from specli.engine import GenerationConfig, run
from specli.engine.grammar import Constraint, compile_grammar
from specli.engine.sampling import probs_from_logits
from specli.errors import UsageError
from specli.types import SamplingParams

TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["read_file", "write_file", "list_dir"]},
        "arguments": {
            "type": "object",
            "properties": {"path": {"type": "string", "maxLength": 40}, "line": {"type": "integer", "maximum": 9999}},
            "required": ["path", "line"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}


def chat(model: Model, text: str) -> list[int]:
    return model.chat_tokens([{"role": "user", "content": text}])


# --- checking and compiling -------------------------------------------------------------


@pytest.mark.parametrize(("kind", "source", "problem"), [
    ("json_schema", '{"type": ', "not valid JSON"),
    ("json_schema", "[1, 2]", "not an object"),
    ("json_schema", '{"type": "nonsense"}', "invalid"),
    ("gbnf", "root ::= foo", "Rule 'foo' not found"),
    ("gbnf", 'root = "x"', "Expected ::="),
    ("choice", "[]", "non-empty JSON list"),
    ("regex", "(unclosed", "invalid"),
])
def test_bad_grammars_are_refused_in_one_line(kind: Any, source: str, problem: str) -> None:
    with pytest.raises(UsageError) as e:
        compile_grammar(kind, source)
    assert problem in e.value.message and "\n" not in e.value.one_line() and e.value.exit_code == 2


def test_cli_refuses_bad_schema_and_grammar_before_loading_models(tmp_path: Any) -> None:
    runner = CliRunner()
    gbnf = tmp_path / "bad.gbnf"
    gbnf.write_text('root ::= "a" | undefined_rule\n')
    for extra in (["--json-schema", '{"type": "object", "properties": 3}'], ["--json-schema", str(tmp_path / "no.json")],
                  ["--grammar", str(gbnf)], ["--grammar", str(gbnf), "--json-schema", "{}"]):
        res = runner.invoke(app, ["generate", "hi", "--target", str(tmp_path / "absent.gguf"), *extra])
        assert res.exit_code == 2, res.output
        assert res.output.startswith("error: ") and len(res.output.strip().splitlines()) <= 2, res.output


def test_cli_json_schema_answer_and_incomplete_grammar(tmp_path: Any) -> None:
    runner = CliRunner()
    schema = tmp_path / "tool.json"
    schema.write_text(json.dumps(TOOL_SCHEMA))
    args = ["generate", "Call a tool to read line 3 of main.py.", "--target", SMOL, "--draft", "none",
            "--drafter", "ngram", "--ctx", "1024", "--json-schema", str(schema), "--json"]
    res = runner.invoke(app, [*args, "-n", "120"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["finish_reason"] == "stop" and out["grammar"] == {"kind": "json_schema", "complete": True}
    assert_valid(json.loads(out["text"]), TOOL_SCHEMA)
    assert out["metrics"]["drafter_steps"]["grammar"] > 0
    res = runner.invoke(app, [*args, "-n", "6"])  # cut by max tokens: says so
    out = json.loads(res.stdout)
    assert res.exit_code == 0 and out["finish_reason"] == "length" and out["grammar"]["complete"] is False


# --- every output follows its schema ----------------------------------------------------


def assert_valid(value: Any, schema: dict[str, Any]) -> None:
    """The part of JSON Schema the strategy below writes."""
    kind = schema.get("type")
    if "enum" in schema:
        assert value in schema["enum"]
    elif kind == "object":
        assert isinstance(value, dict) and set(value) == set(schema["required"])
        for key, sub in schema["properties"].items():
            assert_valid(value[key], sub)
    elif kind == "array":
        assert isinstance(value, list) and len(value) <= schema["maxItems"]
        for item in value:
            assert_valid(item, schema["items"])
    elif kind == "string":
        assert isinstance(value, str) and len(value) <= schema["maxLength"]
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool) and abs(value) <= schema["maximum"]
    elif kind == "boolean":
        assert isinstance(value, bool)
    else:
        raise AssertionError(f"unexpected schema {schema}")


KEYS = st.sampled_from(["name", "path", "id", "count", "items", "ok", "city", "tags", "x"])
LEAF = st.one_of(
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(1, 12)),
    st.builds(lambda n: {"type": "integer", "minimum": -n, "maximum": n}, st.integers(1, 999)),
    st.just({"type": "boolean"}),
    st.builds(lambda xs: {"type": "string", "enum": xs}, st.lists(st.sampled_from(
        ["read", "write", "yes", "no", "red", "a b"]), min_size=1, max_size=4, unique=True)),
)


def _object(children: Any) -> Any:
    return st.dictionaries(KEYS, children, min_size=1, max_size=3).map(lambda props: {
        "type": "object", "properties": props, "required": sorted(props), "additionalProperties": False})


SCHEMAS = st.recursive(LEAF, lambda children: st.one_of(
    _object(children),
    st.builds(lambda item, n: {"type": "array", "items": item, "maxItems": n}, children, st.integers(1, 3)),
), max_leaves=6).filter(lambda s: s.get("type") in ("object", "array"))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SCHEMAS, temperature=st.sampled_from([0.0, 0.9]), seed=st.integers(0, 2**16))
def test_every_output_follows_its_schema(smol: Model, schema: dict[str, Any], temperature: float, seed: int) -> None:
    """Random bounded schemas, greedy and sampled, n-gram and grammar drafting: each
    answer ends because its grammar is complete, and parses and validates."""
    grammar = compile_grammar("json_schema", json.dumps(schema))
    cfg = GenerationConfig(max_tokens=400, draft_max=8, sampling=SamplingParams(temperature=temperature, seed=seed))
    res = run(smol, chat(smol, "Fill in some example data."), cfg, NgramDrafter(), constraint=Constraint(grammar, smol.vocab))
    assert res.finish_reason == "stop", (res.text, schema)
    assert_valid(json.loads(res.text), schema)


# --- greedy: the masked target's tokens -------------------------------------------------


@pytest.mark.parametrize("prompt", ["Call a tool to read line 3 of main.py.", "List the files in /tmp with a tool."])
def test_greedy_constrained_equals_masked_plain_decoding(smol: Model, smol_draft: Model, prompt: str) -> None:
    grammar = compile_grammar("json_schema", json.dumps(TOOL_SCHEMA))
    toks = chat(smol, prompt)
    cfg = GenerationConfig(max_tokens=120, draft_max=8)
    base = run(smol, toks, cfg, None, constraint=Constraint(grammar, smol.vocab))
    assert base.finish_reason == "stop" and base.counters.n_drafted == 0
    with_ngram = run(smol, toks, cfg, NgramDrafter(), constraint=Constraint(grammar, smol.vocab))
    with_model = run(smol, toks, cfg, DraftModelDrafter(smol_draft), constraint=Constraint(grammar, smol.vocab))
    assert with_ngram.tokens == base.tokens and with_model.tokens == base.tokens
    c = with_ngram.counters
    assert c.drafter_steps.get("grammar", 0) > 0 and c.n_target_forwards < base.counters.n_target_forwards
    forced_off = run(smol, toks, GenerationConfig(max_tokens=120, draft_max=8, grammar_drafts=False), NgramDrafter(),
                     constraint=Constraint(grammar, smol.vocab))
    assert forced_off.tokens == base.tokens and "grammar" not in forced_off.counters.drafter_steps
    unconstrained = run(smol, toks, cfg)
    assert unconstrained.tokens != base.tokens  # the mask changed the answer: the test can tell


# --- sampling: the masked target distribution -------------------------------------------


def test_sampling_follows_the_masked_target_distribution(smol: Model, smol_draft: Model) -> None:
    """Temperature 0.8, top-k 4 on both sides of the mask: the first two tokens (t2 from a
    drafted step whose draft model samples unmasked at temperature 1.5, so drafts the
    grammar forbids are cut) follow pm(t1) pm(t2 | t1) of the masked target."""
    grammar = compile_grammar("regex", "( [a-z]+)+")
    params = SamplingParams(temperature=0.8, top_k=4)
    toks = smol.tokenize("Once upon a time", add_special=False)
    exact: dict[tuple[int, int], float] = {}
    unmasked: dict[tuple[int, int], float] = {}
    smol.reset()
    row1 = smol.decode(toks, [len(toks) - 1])[0].copy()
    p1 = probs_from_logits(Constraint(grammar, smol.vocab).masked(row1), params)
    u1 = probs_from_logits(row1, params)
    for t1 in sorted(set(np.flatnonzero(p1 > 0)) | set(np.flatnonzero(u1 > 0))):
        smol.rollback(len(toks))
        row2 = smol.decode([int(t1)], [0])[0].copy()
        u2 = probs_from_logits(row2, params)
        for t2 in np.flatnonzero(u2 > 0):
            unmasked[(int(t1), int(t2))] = float(u1[t1] * u2[t2])
        if p1[t1] > 0:
            c = Constraint(grammar, smol.vocab)
            c.advance([int(t1)])
            p2 = probs_from_logits(c.masked(row2), params)
            for t2 in np.flatnonzero(p2 > 0):
                exact[(int(t1), int(t2))] = float(p1[t1] * p2[t2])

    n = 150
    seen: Counter[tuple[int, int]] = Counter()
    n_drafted = n_accepted = 0
    for seed in range(n):
        cfg = GenerationConfig(max_tokens=3, draft_max=2, sampling=SamplingParams(temperature=0.8, top_k=4, seed=seed))
        res = run(smol, toks, cfg, DraftModelDrafter(smol_draft, SamplingParams(temperature=1.5, top_k=4, seed=seed)),
                  constraint=Constraint(grammar, smol.vocab))
        n_drafted += res.counters.n_drafted
        n_accepted += res.counters.n_accepted
        seen[(res.tokens[0], res.tokens[1])] += 1
    assert 0 < n_accepted < n_drafted
    # at most 16 outcomes, 150 draws: a multinomial's empirical TV is ~0.1 on average and
    # under 0.2 in all but ~1e-4 of runs; the unmasked target lies further than twice that
    bound = 0.2
    assert tv(exact, unmasked) > 2 * bound, "this prompt cannot tell a verifier that ignores the mask apart"
    observed = tv({k: v / n for k, v in seen.items()}, exact)
    assert observed < bound, (observed, bound)


def test_refused_drafts_leave_every_state_in_step(smol: Model, smol_draft: Model) -> None:
    """A verifier that refuses each draft at its first position where the grammar allows
    another token (never at a forced one: there it allows nothing else) and takes that
    token instead: the answer still follows the schema, the grammar follows what was
    emitted, and the draft model's cache stays a prefix of it."""
    from specli.engine.grammar import MaskedRows
    from specli.engine.verify import verify_step
    from specli.types import Verdict

    refused = 0

    def contrary(draft: Any, rows: Any, sampling: Any, rng: Any) -> Verdict:
        nonlocal refused
        if isinstance(rows, MaskedRows):
            for i, d in enumerate(draft.tokens):
                row = rows[i]
                top2 = np.argsort(-row, kind="stable")[:2]
                other = next((int(t) for t in top2 if np.isfinite(row[t]) and t != d), None)
                if other is not None:
                    refused += 1
                    return Verdict(i, other)
        return verify_step(draft, rows, sampling, rng)

    grammar = compile_grammar("json_schema", json.dumps(TOOL_SCHEMA))
    toks = chat(smol, "Call a tool to read line 3 of main.py.")
    for drafter in (NgramDrafter(), DraftModelDrafter(smol_draft)):
        refused = 0
        res = run(smol, toks, GenerationConfig(max_tokens=300, draft_max=8), drafter, contrary,
                  constraint=Constraint(grammar, smol.vocab))
        assert refused > 0 and res.counters.n_forced > 0
        assert res.finish_reason == "stop"
        assert_valid(json.loads(res.text), TOOL_SCHEMA)
    history = [*toks, *res.tokens]
    assert smol_draft.tokens == history[: len(smol_draft.tokens)]


def test_forced_tokens_are_the_only_tokens_the_mask_allows(smol: Model) -> None:
    """Where llguidance reports forced tokens, its mask allows exactly the first of them:
    a forced token has probability 1 under the masked target (its verification cannot
    reject it; it is still verified, at the cost of its row)."""
    grammar = compile_grammar("json_schema", json.dumps(TOOL_SCHEMA))
    res = run(smol, chat(smol, "Call a tool to read line 3 of main.py."), GenerationConfig(max_tokens=120),
              constraint=Constraint(grammar, smol.vocab))
    c = Constraint(grammar, smol.vocab)
    n_forced = 0
    for token in res.tokens:
        forced = c.forced()
        if forced:
            n_forced += 1
            assert c.n_allowed() == 1 and c.allowed(forced[0]) and forced[0] == token
        c.advance([token])
    assert n_forced > 10
