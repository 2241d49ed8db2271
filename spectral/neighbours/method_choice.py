"""Which kNN search ``method="auto"`` picks for X of a given shape (:func:`auto_method`): the exact search or
NN-descent, by the measured cost of each. Plain arithmetic, no numba: the CLI decides with it, before its
cluster starts, whether a run's workers load NN-descent's kernels (:mod:`flows._warm_up`)."""

from __future__ import annotations

#: ``method="auto"`` is the exact search when n_samples < EXACT_MAX_SAMPLES and n_samples * n_features <
#: EXACT_MAX_CELLS (:func:`auto_method`), NN-descent otherwise. Measured on 2 shared cores
#: (benchmarks/results/knn_exact.md: ``bench_knn_exact.py --crossover``; k = 15, medians of 3 interleaved
#: ``KNNIndex.build`` calls in one process, the refined graph included, NN-descent warm: its kernels loaded
#: first), exact / NN-descent seconds: noisy torus d = 8: 1e5 1.07 / 5.44, 1e6 9.5 / 50.7; d = 32: 3e4
#: 0.29 / 1.37, 1e5 0.96 / 1.05, 3e5 4.1 / 14.6, 1e6 13.6 / 16.5; d = 128: 3e4 0.59 / 0.53, 1e5 4.9 / 6.4,
#: 3e5 29.4 / 19.7. 20-cluster Gaussian mixture d = 32: 1e5 1.09 / 1.28, 3e5 9.8 / 11.4, 1e6 70.6 / 91.8;
#: d = 128: 1e5 2.8 / 4.0, 3e5 23.1 / 24.0, 6e5 91.2 / 49.6. Exact is the faster up to 1e6 points at d <= 32
#: and up to ~2.5e5 at d = 128: its cost follows the size of X, n * d, hence the two bounds (1e6 points,
#: 3.2e7 = 1e6 x 32 = 2.5e5 x 128 values). Builds alone are the comparison least favourable to exact:
#: NN-descent's graphs are approximate there (recall 0.96 torus 1e6 x 32, 0.74 mixture 1e6 x 32, 0.50 mixture
#: 3e5 x 128) and its queries cost far more (1e4 new points at torus 1e6 x 32: 174 s against 1.0 s).
#: Data without low-dimensional structure are the exception: one 32-d Gaussian, 1e5 points, 6.1 / 1.6 s.
EXACT_MAX_SAMPLES = 1_000_000
EXACT_MAX_CELLS = 32_000_000


def auto_method(n_samples: int, n_features: int) -> str:
    """The method ``method="auto"`` resolves to for X of shape ``(n_samples, n_features)``: "exact" when
    ``n_samples < EXACT_MAX_SAMPLES`` and ``n_samples * n_features < EXACT_MAX_CELLS`` (measured there:
    :data:`EXACT_MAX_SAMPLES`), else "nndescent"."""
    exact = n_samples < EXACT_MAX_SAMPLES and n_samples * n_features < EXACT_MAX_CELLS
    return "exact" if exact else "nndescent"
