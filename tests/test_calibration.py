"""Calibration: the cache, and a controller that recovers from a poisoned cost table."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import QWEN_TARGET, SMOL, model_file

from specli.backend import LoadOptions, Model
from specli.drafters import AutoDrafter, NgramDrafter
from specli.drafters.auto.costs import CostModel
from specli.engine import GenerationConfig, generate
from specli.runtime.measure import calibration
from specli.runtime.measure.calibration import Calibration, exact_batch_from, fix_outliers
from specli.runtime.measure.load import Load


def test_cache_round_trip_and_version(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    cal = Calibration(0.07, [1, 2, 4], [1.0, 1.4, 1.7], 0.4, 3, 0.45, "now")
    calibration.store("k", cal, path)
    assert calibration.load("k", path) == cal
    assert calibration.load("other", path) is None
    path.write_text('{"version": 3, "entries": {"k": {"verify": [1.0]}}}')  # an older format: re-measured
    assert calibration.load("k", path) is None
    path.write_text("not json")
    assert calibration.load("k", path) is None


def test_the_machine_and_what_runs_observed_are_stored_too(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    cal = Calibration(0.07, [1, 2, 4], [1.0, 1.4, 1.7], provisional=True, load={"others": 0.5, "steal": 0.0,
                      "loadavg": 1.2, "spread": 0.1}, observed={"t1": 0.08, "sizes": [2.0], "ratios": [1.6]})
    calibration.store("k", cal, path)
    assert calibration.load("k", path) == cal
    assert Load(**cal.load).busy


@pytest.fixture(scope="module")
def smol_short() -> Iterator[Model]:
    """SmolLM2 with no room for the noise past NOISE_CONTEXT: calibrated in 2 s, not 7."""
    m = Model(model_file(SMOL), LoadOptions(n_ctx=512))
    yield m
    m.close()


def _burners() -> list[subprocess.Popen[bytes]]:
    """A busy machine: half the cores spinning in other processes (stopped by the caller),
    twice what counts as busy."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(1, (os.cpu_count() or 2) // 2))]


def test_a_busy_machine_is_seen_and_measured_again_at_the_next_idle_start(
        smol_short: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT

    monkeypatch.setattr(calibration, "RETRY_WAIT", 0.1)
    context = smol_short.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
    path = tmp_path / "calibration.json"
    burners = _burners()
    try:
        busy = calibration.load_or_measure("k", smol_short, None, context, path)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert busy.provisional and Load(**busy.load).others > 0.2, busy.load
    assert calibration.load("k", path).provisional  # type: ignore[union-attr]
    stored = calibration.load("k", path)
    idle = calibration.load_or_measure("k", smol_short, None, context, path)
    assert calibration.load("k", path) == idle
    if idle.provisional:  # another process kept this machine busy: kept as it was, or measured busy again
        assert idle == stored or Load(**idle.load).busy, idle.load
    else:
        assert idle.t1 < busy.t1


def test_exact_chunk_is_the_longest_exact_prefix_of_sizes() -> None:
    assert exact_batch_from({2: True, 3: True, 4: False, 5: True}) == 3
    assert exact_batch_from({2: False, 3: True}) == 1
    assert exact_batch_from({n: True for n in range(2, 17)}) == 16


def test_the_exact_batch_alone_is_the_one_measure_finds(smol_short: Model) -> None:
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT

    context = smol_short.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
    found = calibration.measure_exact_batch(smol_short, context)
    assert found == calibration.measure(smol_short, None, context).exact_batch and found >= 2
    assert smol_short.n_past == 0


def test_implausible_timings_are_flagged_for_remeasuring() -> None:
    sizes = [1, 2, 3, 4, 8]
    assert fix_outliers(sizes, [1.0, 1.4, 1.8, 1.7, 3.0]) == []  # a dip at 4 rows is real (repack gemm)
    assert fix_outliers(sizes, [1.0, 5.0, 1.8, 1.7, 3.0]) == [2]  # dearer than 2 steps and than 8 rows
    assert fix_outliers(sizes, [1.0, 1.4, 1.8, 1.7, 9.0]) == [8]  # dearer than 8 plain steps


# ---------------------------------------------------------- a poisoned table (real model)

STEPS_TO_RECOVER = 64
MODULE = """\
def parse_size(text):
    text = text.strip().lower()
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def format_size(n):
    for unit in ("", "k", "m", "g"):
        if n < 1024:
            return f"{n:.0f}{unit}"
        n /= 1024
    return f"{n:.1f}t"


def chunks(items, size):
    if size < 1:
        raise ValueError("size must be at least 1")
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def merge_counts(a, b):
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0) + value
    return out
"""
PROMPT = ("Add type hints and a one-line docstring to every function of this module. Reply with the whole "
          "module in one Python code block and nothing else.\n\n```python\n" + MODULE + "```")


def _modelled_speed_after(costs: CostModel, truth: Calibration, target: object, prompt: list[int],
                          skip: int) -> tuple[float, int]:
    """Run auto (n-gram only) from `costs`; after the first `skip` steps, tokens per
    second as the true cost table prices the steps taken (counts, not wall time), and
    the number of steps counted."""
    auto = AutoDrafter(costs, None, NgramDrafter(3, 12, target.is_eog))  # type: ignore[attr-defined]
    true_costs = CostModel(truth.t1, list(truth.sizes), list(truth.ratios))
    tokens, seconds, steps = 0, 0.0, 0
    for i, ev in enumerate(generate(target, prompt, GenerationConfig(max_tokens=448, draft_max=64), auto)):  # type: ignore[arg-type]
        if i > skip:
            tokens += len(ev.tokens)
            seconds += true_costs.verify_costs(ev.n_drafted)[ev.n_drafted]
            steps += 1
    return tokens / seconds if seconds else 0.0, steps


@pytest.mark.parametrize("factor", [4.0, 0.25])
def test_auto_recovers_from_a_poisoned_cost_table(qwen_target: object, qwen_calibration: Calibration,
                                                  factor: float) -> None:
    """Start auto from a batch-cost table inflated 4x (it would never draft) or deflated 4x
    (it would draft recklessly): the costs it observes correct the table, and after 64
    steps it is at least 90 % as fast as with the fresh table, speed counted from the steps
    it takes priced by the true table (not wall time, which is noisy)."""
    model_file(QWEN_TARGET)
    prompt = qwen_target.chat_tokens([{"role": "user", "content": PROMPT}])  # type: ignore[attr-defined]
    cal = qwen_calibration

    def costs(c: Calibration) -> CostModel:
        return CostModel(c.t1, list(c.sizes), list(c.ratios), c.draft_ratio)

    for _attempt in range(2):  # the controller learns from wall-clock timings: one retry for a machine hiccup
        fresh, n_fresh = _modelled_speed_after(costs(cal), cal, qwen_target, prompt, STEPS_TO_RECOVER)
        poisoned_costs = costs(replace(cal, ratios=[1.0] + [r * factor for r in cal.ratios[1:]]))
        poisoned, n_poisoned = _modelled_speed_after(poisoned_costs, cal, qwen_target, prompt, STEPS_TO_RECOVER)
        if poisoned >= 0.9 * fresh and fresh * cal.t1 > 1.05:
            break
    assert n_fresh > 10 and n_poisoned > 10  # long enough to tell
    assert fresh * cal.t1 > 1.05  # the text is worth drafting: plain decoding would be 1.0
    assert poisoned >= 0.9 * fresh, (poisoned * cal.t1, fresh * cal.t1)
    assert poisoned_costs.drifted  # and the runtime stores the corrected table


def test_measured_again_the_stored_context_axis_is_kept(smol_short: Model, tmp_path: Path) -> None:
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT

    context = smol_short.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
    path = tmp_path / "calibration.json"
    rows = [[1.5 + j for j in range(len(calibration.CONTEXT_SIZES))]]
    off = Calibration(9.0, [1, 2], [1.0, 1.9], provisional=True, contexts=[4096], context_ratios=rows,
                      context_t1=[0.5], observed={"t1": 30.0, "t1_off": 3.3})
    calibration.store("k", off, path)
    again = calibration.load_or_measure("k", smol_short, None, context, path)
    if again == off:  # another process kept this machine busy: the provisional table waits for an idle start
        return
    assert again.t1 < 1.0, (again.t1, again.load)  # the short table measured again
    assert again.provisional == Load(**again.load).busy, again.load
    assert (again.contexts, again.context_ratios, again.context_t1) == ([4096], rows, [0.5])
    fresh = calibration.load_or_measure("k", smol_short, None, context, path, recalibrate=True)
    assert fresh.contexts == [] and calibration.load("k", path) == fresh
