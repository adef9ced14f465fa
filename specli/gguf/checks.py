"""Cross-checks over a parsed GGUF's metadata and tensor table: values llama.cpp
asserts on (aborting the process) instead of refusing the file cleanly."""

from __future__ import annotations

import math
from typing import Any

from specli.gguf.format import (
    LLAMA_MAX_EXPERTS,
    LLAMA_MAX_LAYERS,
    SPECIAL_ID_KEYS,
    TOKENS_KEY,
    GgufArray,
    TensorInfo,
)
from specli.gguf.reader import Damaged, show


def check_tokenizer(metadata: dict[str, Any], key_at: dict[str, tuple[int, int]]) -> None:
    """Cross-checks of the tokenizer arrays and special token ids (a damaged id makes
    llama.cpp abort on an assertion when it tokenizes)."""
    tokens = metadata.get(TOKENS_KEY)
    if tokens is None:
        return  # llama.cpp refuses a vocabulary-less model cleanly
    if not isinstance(tokens, GgufArray) or tokens.elem_type != "string":
        raise Damaged(f"{TOKENS_KEY} must be an array of strings", key_at[TOKENS_KEY][0])
    n = tokens.length
    for key, elem_types in (("tokenizer.ggml.scores", ("f32", "i32")), ("tokenizer.ggml.token_type", ("i32",))):
        arr = metadata.get(key)
        if arr is None:
            continue
        if not isinstance(arr, GgufArray) or arr.elem_type not in elem_types:
            raise Damaged(f"{key} must be an array of {' or '.join(elem_types)}", key_at[key][0])
        if arr.length != n:
            raise Damaged(f"{key} has {arr.length} entries for {n} vocabulary tokens", key_at[key][0])
    for key in SPECIAL_ID_KEYS:
        v = metadata.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise Damaged(f"{key} must be an integer token id", key_at[key][0])
        if not 0 <= v < n:
            raise Damaged(f"{key} {v} is outside the {n}-token vocabulary", key_at[key][0])


def check_hparams(metadata: dict[str, Any], key_at: dict[str, tuple[int, int]], arch: str) -> None:
    """Hyperparameters llama.cpp checks with GGML_ASSERT, which aborts the process on a
    damaged value instead of refusing the file."""

    def bad(key: str, what: str) -> Damaged:
        return Damaged(f"{key} {what}", key_at[key][0])

    def count(suffix: str) -> tuple[str, int | None]:
        key = f"{arch}.{suffix}"
        v = metadata.get(key)
        if isinstance(v, GgufArray):  # per-layer values: the largest matters
            nums = [x for x in v.values or () if isinstance(x, int) and not isinstance(x, bool)]
            return key, max(nums, default=None)
        return key, v if isinstance(v, int) and not isinstance(v, bool) else None

    for key, v in metadata.items():
        if key.startswith(f"{arch}.") and isinstance(v, float):
            if not math.isfinite(v):
                raise bad(key, f"is {v}")
            if key.endswith("epsilon") and v < 0:
                raise bad(key, f"is negative ({v})")
    key, n_layer = count("block_count")
    if n_layer is not None and not 1 <= n_layer <= LLAMA_MAX_LAYERS:
        raise bad(key, f"{n_layer} is outside 1..{LLAMA_MAX_LAYERS}")
    key, nextn = count("nextn_predict_layers")
    if nextn is not None and n_layer is not None and nextn > n_layer:
        raise bad(key, f"{nextn} exceeds the {n_layer} layers")
    key_e, n_expert = count("expert_count")
    key_u, n_used = count("expert_used_count")
    key_g, n_groups = count("expert_group_count")
    if n_expert is not None and n_expert > LLAMA_MAX_EXPERTS:
        raise bad(key_e, f"{n_expert} exceeds {LLAMA_MAX_EXPERTS}")
    if n_used is not None and n_used > (n_expert or 0):
        raise bad(key_u, f"{n_used} exceeds the expert count {n_expert or 0}")
    if n_groups is not None and n_groups > 0 and n_groups >= (n_expert or 0):
        raise bad(key_g, f"{n_groups} is not below the expert count {n_expert or 0}")



def check_ranges(tensors: list[tuple[TensorInfo, int]], alignment: int, data_offset: int, size: int) -> None:
    data_size = size - data_offset
    for t, at in tensors:
        if t.offset % alignment:
            raise Damaged(
                f"tensor '{show(t.name)}' offset {t.offset} is not a multiple of the alignment {alignment}", at
            )
        if t.offset > data_size or t.nbytes > data_size - t.offset:
            raise Damaged(
                f"tensor '{show(t.name)}' data [{t.offset}, {t.offset + t.nbytes}) lies outside the "
                f"{data_size}-byte data section (file truncated?)",
                at,
            )
    spans = sorted((t.offset, t.offset + t.nbytes, t.name, at) for t, at in tensors if t.nbytes)
    for (_, end_a, name_a, _), (start_b, _, name_b, at_b) in zip(spans, spans[1:]):
        if start_b < end_a:
            raise Damaged(
                f"tensor '{show(name_b)}' data starts at {start_b}, inside tensor '{show(name_a)}' "
                f"(which ends at {end_a})",
                at_b,
            )
