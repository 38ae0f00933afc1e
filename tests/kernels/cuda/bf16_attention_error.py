#!/usr/bin/env python3
"""How far a correct tensor-core attention kernel lands from the float reference.

The CUDA prefill kernel (kernels/cuda/attention_tc_kernels.cu) rounds Q and the softmax
weights P to BF16 for the matrix units and keeps the running max, the sums and the output
in float32. This models that in float64 (online softmax over 32-key tiles, P rounded
relative to the running max) on the shapes of CudaAttentionTest's tensor-core test and
prints, per head layout, the largest |error| / (|exact| + rms(exact)) — the measure
ExpectAllClose uses — and the rms error over rms(exact). kBf16AttentionTolerance in
cuda_test_util.h is set from it. Needs numpy.
"""
import numpy as np


def bf16(a):
    """Round to the nearest BF16 (ties to even), returned as float64."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def attention_errors(rng, seqs, head_dim, q_heads, kv_heads, tile=32):
    exact_rows, kernel_rows = [], []
    scale = 1.0 / np.sqrt(head_dim)
    for context, new in seqs:
        # The test's inputs: q in (-2, 2), K and V in (-1, 1), stored as BF16 cache bytes.
        k = bf16(rng.uniform(-1, 1, (kv_heads, context, head_dim)))
        v = bf16(rng.uniform(-1, 1, (kv_heads, context, head_dim)))
        q = rng.uniform(-2, 2, (new, q_heads, head_dim))
        for t in range(new):
            visible = context - new + t + 1
            for h in range(q_heads):
                kh, vh = k[h // (q_heads // kv_heads), :visible], v[h // (q_heads // kv_heads), :visible]
                s = kh @ q[t, h] * scale
                p = np.exp(s - s.max())
                exact_rows.append(p @ vh / p.sum())
                s = (kh @ bf16(q[t, h]) * scale).astype(np.float32).astype(np.float64)
                m, l, acc = -np.inf, 0.0, np.zeros(head_dim)
                for j in range(0, visible, tile):
                    m_new = max(m, s[j:j + tile].max())
                    p = np.exp(s[j:j + tile] - m_new)
                    alpha = np.exp(m - m_new) if np.isfinite(m) else 0.0
                    acc = acc * alpha + bf16(p) @ vh[j:j + tile]
                    l = l * alpha + p.sum()
                    m = m_new
                kernel_rows.append(acc / l)
    exact, kernel = np.concatenate(exact_rows), np.concatenate(kernel_rows)
    rms = np.sqrt(np.mean(exact ** 2))
    worst = np.max(np.abs(kernel - exact) / (np.abs(exact) + rms))
    return worst, np.sqrt(np.mean((kernel - exact) ** 2)) / rms


def main():
    rng = np.random.default_rng(1)
    seqs = [(130, 130), (97, 40), (40, 7), (5, 5), (20, 1), (70, 65)]
    for head_dim in (64, 128):
        for q_heads, kv_heads in ((6, 2), (8, 1)):
            worst, rms = attention_errors(rng, seqs, head_dim, q_heads, kv_heads)
            print(f"head_dim {head_dim:3d}  heads {q_heads}/{kv_heads}:  "
                  f"largest {worst:.2e} of (|exact| + rms), rms {rms:.2e}")


if __name__ == "__main__":
    main()
