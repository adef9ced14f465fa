"""The GPU check (scripts/gpu-check.sh) end to end on this CPU with tiny shapes: random-weight
GGUF models written, quantized and loaded by llama.cpp, measured, priced and reported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from specli.gguf import validate_gguf

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_check_runs_end_to_end_on_tiny_shapes(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = subprocess.run([str(ROOT / "scripts" / "gpu-check.sh"), "--small", str(out)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "gpu-check.json").read_text())
    assert [(m["shape"], m["type"]) for m in report["models"]] == [("tiny", "F16"), ("tiny", "Q4_K_M")]
    recorded = json.loads((ROOT / "docs" / "gpu-check" / "steps.json").read_text())
    for m in report["models"]:
        assert m["t1_ms"] > 0 and set(m["batch_ratio"]) == {"1", "2", "4", "8", "16", "33", "65"}
        assert m["batch_ratio"]["65"] > m["batch_ratio"]["2"] * 0.5  # a real curve, not a constant
        for argmax in ("off", "on"):
            plain = m[f"specli_plain_argmax_{argmax}"]
            assert plain["decode_tok_s"] > 0 and plain["host_ms"] > 0 and plain["tokens"] > 1
        assert set(m["priced_speedup"]) == set(recorded[m["type"]])
        assert all(v is None or v > 0 for v in m["priced_speedup"].values())
    md = (out / "gpu-check.md").read_text()
    assert "| tiny Q4_K_M |" in md and "priced from the steps" in md


def test_written_gguf_validates(tmp_path: Path) -> None:
    import numpy as np

    from specli.gguf.writer import GGML_F16, GGML_F32, Tensor, write_gguf

    pool = np.arange(10, dtype=np.float32)
    path = tmp_path / "t.gguf"
    size = write_gguf(path, {"general.architecture": "x", "x.block_count": 1, "some.list": ["a", "b"],
                             "some.ids": [1, 2, 3], "some.flag": True, "some.f": 0.5},
                      [Tensor("a", (4, 8), GGML_F16, pool, zero_tail=4), Tensor("b", (3,), GGML_F32, pool)])
    assert path.stat().st_size == size
    summary = validate_gguf(path)
    assert [t.name for t in summary.tensors] == ["a", "b"]
    raw = path.read_bytes()
    a = np.frombuffer(raw, dtype="<f2", count=32, offset=summary.data_offset)
    assert list(a[:12]) == [*range(10), 0, 1] and list(a[-4:]) == [0, 0, 0, 0]
