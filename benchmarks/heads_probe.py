"""How well Medusa-1 heads trained here, in minutes, from the target's own hidden states
predict the target's next tokens (#53): the acceptance the learned drafters could reach
on this target, before any of them drafts.

Data: the target prefills text with features on (backend.features): each position's
hidden state (the lm_head's input) and the target's own greedy token there (its logits'
argmax, so labels are the target's, not the text's). Training text: specli's own
sources; held out: this repository's tests (never the bench prompts). The reduced draft
vocabulary is the target's most frequent greedy tokens over the training rows (its
coverage on the held-out rows is reported), and the lm_head restricted to it is solved
exactly from hidden states and logits rows (logits = W h: least squares, no weights read
from the file). Head k (k = 1..K) is a Medusa-1 residual block, h + SiLU(A_k h + b_k),
through that frozen lm_head, trained with Adam on cross-entropy against the target's
token at t+k, in numpy with hand-written gradients.

Reported per head on the held-out rows: top-1 agreement with the target (alone), and
the chain acceptance alpha_k (heads 1..k all agree, what a chain draft of k tokens
keeps), so tau at k drafted tokens is 1 + sum of the chain's alphas.

    python -m benchmarks.heads_probe
    python -m benchmarks.heads_probe --target qwen2.5-coder-1.5b-instruct-f16 --train-tokens 16000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from specli import registry
from specli.backend import LoadOptions, Model

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 256  # tokens a decode
WINDOW = 2048  # tokens of context: the text is read in windows of this many, each from an empty cache


def texts(folder: str, limit: int) -> str:
    """Python files under `folder`, joined, up to about `limit` characters."""
    out, n = [], 0
    for path in sorted((ROOT / folder).rglob("*.py")):
        text = path.read_text()
        out.append(text)
        n += len(text)
        if n >= limit:
            break
    return "\n\n".join(out)


def collect(m: Model, tokens: list[int], vocab: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(hidden states, the target's greedy token, logits over `vocab` or nothing) of every
    position of `tokens`, prefilled in chunks with features on."""
    m.set_features(True)
    hidden, top, picked = [], [], []
    try:
        for start in range(0, len(tokens), CHUNK):
            if start % WINDOW == 0:
                m.reset()
            part = tokens[start:start + CHUNK]
            rows = m.decode(part, range(len(part)))
            top.append(rows.argmax(axis=1).astype(np.int32))
            if vocab is not None:
                picked.append(rows[:, vocab].copy())
            hidden.append(m.hidden().astype(np.float32))
    finally:
        m.set_features(False)
    return np.concatenate(hidden), np.concatenate(top), np.concatenate(picked) if picked else np.empty(0)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class Heads:
    """K Medusa-1 blocks over a frozen lm_head `w` (V_r x d)."""

    def __init__(self, k: int, d: int, w: np.ndarray, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.w = w
        self.a = [rng.normal(0, 0.02 / np.sqrt(d), (d, d)).astype(np.float32) for _ in range(k)]
        self.b = [np.zeros(d, np.float32) for _ in range(k)]
        self.m = [[np.zeros_like(p) for p in (a, b)] for a, b in zip(self.a, self.b)]
        self.v = [[np.zeros_like(p) for p in (a, b)] for a, b in zip(self.a, self.b)]
        self.t = 0

    def logits(self, i: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pre = h @ self.a[i] + self.b[i]
        out = h + silu(pre)
        return out @ self.w.T, out, pre

    def step(self, h: np.ndarray, labels: list[np.ndarray], lr: float) -> float:
        """One Adam step of every head on a batch (labels[i]: indices into the reduced
        vocabulary, -1 where the target's token is outside it); the mean loss."""
        self.t += 1
        total = 0.0
        for i, y in enumerate(labels):
            keep = y >= 0
            hk, yk = h[keep], y[keep]
            z, _, pre = self.logits(i, hk)
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            total += float(-np.log(p[np.arange(len(yk)), yk] + 1e-9).mean())
            p[np.arange(len(yk)), yk] -= 1.0
            g_out = (p / len(yk)) @ self.w  # dL/d(out)
            sig = 1.0 / (1.0 + np.exp(-pre))
            g_pre = g_out * (sig * (1.0 + pre * (1.0 - sig)))  # d silu
            for j, g in enumerate((hk.T @ g_pre, g_pre.sum(axis=0))):
                param = self.a[i] if j == 0 else self.b[i]
                m, v = self.m[i][j], self.v[i][j]
                m *= 0.9
                m += 0.1 * g
                v *= 0.999
                v += 0.001 * g * g
                param -= lr * (m / (1 - 0.9 ** self.t)) / (np.sqrt(v / (1 - 0.999 ** self.t)) + 1e-8)
        return total / len(labels)


def shifted(top: np.ndarray, k: int, index: np.ndarray) -> np.ndarray:
    """Head k's labels: the target's token k positions on, as reduced-vocabulary indices
    (-1 outside it, and past the end)."""
    y = np.full(len(top), -1, np.int32)
    y[:len(top) - k] = index[top[k:]]
    return y


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heads_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--train-tokens", type=int, default=12000)
    p.add_argument("--eval-tokens", type=int, default=2000)
    p.add_argument("--vocab", type=int, default=8192, help="reduced draft vocabulary size")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    t0 = time.perf_counter()
    m = Model(registry.resolve(args.target), LoadOptions(n_ctx=WINDOW, n_threads=args.threads))
    try:
        train_toks = m.tokenize(texts("specli", args.train_tokens * 5))[:args.train_tokens]
        eval_toks = m.tokenize(texts("tests", args.eval_tokens * 5))[:args.eval_tokens]
        h_train, top_train, _ = collect(m, train_toks)
        counts = np.bincount(top_train, minlength=m.n_vocab)
        vocab = np.argsort(-counts)[:args.vocab]
        h_fit, _, z_fit = collect(m, train_toks[:max(2 * m.n_embd, 2048)], vocab)
        h_eval, top_eval, _ = collect(m, eval_toks)
        t_data = time.perf_counter() - t0
    finally:
        m.close()
    w = np.linalg.lstsq(h_fit, z_fit, rcond=None)[0].T.astype(np.float32)  # (V_r, d): logits = W h
    index = np.full(len(counts), -1, np.int32)
    index[vocab] = np.arange(len(vocab))
    fit_top1 = float((vocab[(h_eval @ w.T).argmax(axis=1)] == top_eval).mean())
    coverage = float((index[top_eval] >= 0).mean())
    heads = Heads(args.heads, h_train.shape[1], w)
    labels = [shifted(top_train, k, index) for k in range(1, args.heads + 1)]
    rng = np.random.default_rng(1)
    t1 = time.perf_counter()
    for epoch in range(args.epochs):
        order = rng.permutation(len(h_train))
        losses = [heads.step(h_train[b], [y[b] for y in labels], 1e-3)
                  for b in np.array_split(order, max(1, len(order) // 256))]
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.3f}", flush=True)
    t_train = time.perf_counter() - t1
    agree = [vocab[heads.logits(i, h_eval)[0].argmax(axis=1)] for i in range(args.heads)]
    n = len(top_eval) - args.heads
    alone = [float((agree[i][:n] == top_eval[i + 1:i + 1 + n]).mean()) for i in range(args.heads)]
    chain, ok = [], np.ones(n, bool)
    for i in range(args.heads):
        ok &= agree[i][:n] == top_eval[i + 1:i + 1 + n]
        chain.append(float(ok.mean()))
    print(f"\n{args.target}: {len(h_train)} training rows, {len(h_eval)} held out; data {t_data:.0f} s, "
          f"training {t_train:.0f} s ({args.epochs} epochs)")
    print(f"reduced vocabulary {len(vocab)}: covers {coverage:.1%} of the held-out greedy tokens; its fitted "
          f"lm_head agrees with the target on {fit_top1:.1%}")
    print("| head k | alone: agrees with the target's token at t+k | chain alpha_k | tau at k drafted |")
    print("|---:|---:|---:|---:|")
    for i in range(args.heads):
        print(f"| {i + 1} | {alone[i]:.1%} | {chain[i]:.1%} | {1 + sum(chain[:i + 1]):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
