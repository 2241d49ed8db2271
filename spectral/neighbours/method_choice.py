"""Which kNN search ``method="auto"`` picks for X of a given shape (:func:`auto_method`): the exact search or
NN-descent, by the cost of each (``benchmarks/results/knn_exact.md``). Plain arithmetic, no numba: a flow decides
with it, before its cluster starts, whether a run's workers load NN-descent's kernels (:mod:`tasks.warm_up`)."""

from __future__ import annotations

#: ``method="auto"`` is the exact search when n_samples < EXACT_MAX_SAMPLES and n_samples * n_features <
#: EXACT_MAX_CELLS (:func:`auto_method`), NN-descent otherwise. The exact search builds the graph faster up to
#: 1e6 points at d <= 32 and up to about 2.5e5 points at d = 128: its cost follows the size of X, n * d, hence the
#: two bounds (1e6 points, 3.2e7 = 1e6 x 32 = 2.5e5 x 128 values). Builds alone are the comparison least
#: favourable to exact: NN-descent's graphs are approximate, and its queries of new points cost far more. Data
#: without low-dimensional structure (one Gaussian cloud) are the exception, and not what spectral embeddings
#: are for. The timings behind the bounds: ``benchmarks/results/knn_exact.md`` ("The method="auto" rule").
EXACT_MAX_SAMPLES = 1_000_000
EXACT_MAX_CELLS = 32_000_000


def auto_method(n_samples: int, n_features: int) -> str:
    """The method ``method="auto"`` resolves to for X of shape ``(n_samples, n_features)``: "exact" when
    ``n_samples < EXACT_MAX_SAMPLES`` and ``n_samples * n_features < EXACT_MAX_CELLS`` (why these bounds:
    :data:`EXACT_MAX_SAMPLES`), else "nndescent"."""
    exact = n_samples < EXACT_MAX_SAMPLES and n_samples * n_features < EXACT_MAX_CELLS
    return "exact" if exact else "nndescent"
