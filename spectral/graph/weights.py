"""Edge weights of kNN graphs and the weight rows of new (out-of-sample) points.

Weightings (``d`` = kNN distance, CK08 Sect. 3.3 and LQCL09 Sect. 4):

- ``"binary"``: ``w_ij = 1``.
- ``"heat"``: ``w_ij = exp(-d_ij^2 / sigma^2)`` (CK08 eq. 14, with the sign typo exp(+...) corrected);
  ``sigma`` defaults to the mean of all kNN distances.
- ``"local_scaling"``: ``w_ij = exp(-d_ij^2 / (sigma_i sigma_j))`` (CK08 eq. 15, Zelnik-Manor & Perona),
  ``sigma_i`` = distance of ``i`` to its ``scale_k``-th neighbour (``scale_k`` defaults to ``k``, the graph's
  own neighbourhood size; Zelnik-Manor & Perona used the 7th).
- ``"hein_maier"``: ``w_ij = exp(-d_ij^2 / max(h_i, h_j)^2)`` with ``h_i`` the distance to the ``scale_k``-th
  neighbour (LQCL09, weights of Hein & Maier).

Duplicates and floors: a point with more than ``scale_k`` exact duplicates has ``sigma_i = 0``. Every per-point
scale is floored at ``floor`` = the smallest positive kNN distance of the training graph (1.0 if all kNN
distances are 0), and a default heat ``sigma`` of 0 becomes 1.0. So every exponent is finite and <= 0, every
weight lies in [0, 1] and no NaN or inf can appear; duplicates get weight 1. Weights that underflow to 0
(far points, tiny scales) are dropped from the sparse structure, which can isolate a point: the Laplacian
handles degree 0 (see :mod:`spectral.graph.laplacian`).

Symmetrization of the directed kNN relation: ``"or"`` (``max(A, A^T)``: an edge if either point is among the
other's neighbours), ``"and"`` (``min(A, A^T)``: mutual neighbours only), ``"mean"`` (``(A + A^T) / 2``).
The kernels are symmetric in (i, j) and the kNN distances are exactly symmetric (:mod:`spectral.neighbours.knn`), so
"or" keeps the weight value unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._validation import check_choice, check_float, check_int
from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.neighbours.index import check_knn_graph

WEIGHTINGS = ("local_scaling", "heat", "binary", "hein_maier")
SYMMETRIZATIONS = ("or", "and", "mean")


@dataclass(frozen=True)
class WeightParams:
    """Resolved weighting parameters of a training graph (JSON-able with :meth:`to_attrs`).

    ``sigma`` is the heat bandwidth (None for other weightings), ``floor`` the per-point scale floor,
    ``scale_k`` the 1-based neighbour rank that defines the per-point scales.
    """

    weighting: str
    symmetrize: str
    n_neighbors: int
    scale_k: int
    sigma: float | None
    floor: float

    def to_attrs(self) -> dict:
        """Plain-dict form for a model state."""
        return asdict(self)

    @classmethod
    def from_attrs(cls, attrs: dict) -> WeightParams:
        """Inverse of :meth:`to_attrs`."""
        return cls(**{name: attrs[name] for name in cls.__dataclass_fields__})


def fit_weight_params(
    distances: Any,
    *,
    weighting: str = "local_scaling",
    symmetrize: str = "or",
    sigma: float | None = None,
    scale_k: int | None = None,
) -> tuple[WeightParams, np.ndarray, np.ndarray]:
    """Resolve the weighting of a training kNN graph.

    Parameters
    ----------
    distances : array, shape (n, k)
        Sorted kNN distances of the training points (no self-neighbours); float32 is read without a float64 copy.
    weighting, symmetrize, sigma, scale_k
        As :func:`knn_weights`.

    Returns
    -------
    params : WeightParams
    scales : ndarray, shape (n,)
        Floored per-point scales ``sigma_i`` / ``h_i`` (ones for "binary" and "heat").
    radii : ndarray, shape (n,)
        Distance of each point to its k-th neighbour (decides whether a new point would enter its kNN).
    """
    dist = np.asarray(distances)
    if dist.dtype != np.float32:
        dist = dist.astype(np.float64, copy=False)
    k = dist.shape[1]
    smallest = float(np.min(dist, where=dist > 0, initial=np.inf))  # no (n k,) copy of the positive ones
    params = resolve_weight_params(k, weighting=weighting, symmetrize=symmetrize, sigma=sigma, scale_k=scale_k,
                                   min_positive=smallest if np.isfinite(smallest) else None,
                                   mean_distance=float(dist.mean(dtype=np.float64)))
    return params, _scales(dist, params), dist[:, k - 1].astype(np.float64)


def resolve_weight_params(k: int, *, weighting: str, symmetrize: str, sigma: float | None, scale_k: int | None,
                          min_positive: float | None, mean_distance: float) -> WeightParams:
    """:class:`WeightParams` from two summaries of the (n, k) kNN distances: the smallest positive one (None if
    all are 0) and their mean. :func:`fit_weight_params` passes those of the whole array; a graph held as row
    blocks on several workers reduces them over its blocks (:mod:`spectral.eigen.sharded`)."""
    weighting = check_choice("weighting", weighting, WEIGHTINGS)
    symmetrize = check_choice("symmetrize", symmetrize, SYMMETRIZATIONS)
    scale_k = k if scale_k is None else check_int("scale_k", scale_k, low=1, high=k)
    floor = min_positive if min_positive is not None else 1.0
    if weighting == "heat":
        if sigma is None:
            sigma = mean_distance if mean_distance > 0 else 1.0
        else:
            sigma = check_float("sigma", sigma, low=0.0, low_inclusive=False)
    else:
        sigma = None
    return WeightParams(weighting, symmetrize, k, scale_k, sigma, float(floor))


def scales_of(distances: np.ndarray, params: WeightParams) -> np.ndarray:
    """Floored per-point scales ``(m,)`` of rows of sorted kNN distances ``(m, k)`` (ones for binary / heat)."""
    return _scales(np.asarray(distances, dtype=np.float64), params)


def knn_weights(
    indices: Any,
    distances: Any,
    *,
    weighting: str = "local_scaling",
    symmetrize: str = "or",
    sigma: float | None = None,
    scale_k: int | None = None,
) -> sp.csr_matrix:
    """Symmetric weight matrix of a kNN graph.

    Parameters
    ----------
    indices : int array, shape (n, k)
        Neighbours of each point (no self-neighbours), as :func:`spectral.neighbours.knn.knn_graph` returns.
    distances : array, shape (n, k)
        Their distances, sorted increasing along each row.
    weighting : {"local_scaling", "heat", "binary", "hein_maier"}
    symmetrize : {"or", "and", "mean"}
    sigma : float > 0, optional
        Heat-kernel bandwidth; default the mean kNN distance. Only used by "heat".
    scale_k : int in [1, k], optional
        Neighbour rank defining ``sigma_i`` / ``h_i``; default ``k``.

    Returns
    -------
    W : scipy.sparse.csr_matrix, shape (n, n), float64
        Symmetric, zero diagonal, entries in (0, 1].
    """
    return fit_knn_weights(indices, distances, weighting=weighting, symmetrize=symmetrize, sigma=sigma,
                           scale_k=scale_k)[0]


def fit_knn_weights(indices: Any, distances: Any, **weighting: Any
                    ) -> tuple[sp.csr_matrix, WeightParams, np.ndarray, np.ndarray]:
    """:func:`knn_weights` (same parameters) with what :func:`fit_weight_params` resolved on the way:
    ``(W (n, n), params, scales (n,), radii (n,))``, for callers that store both (one pass over the graph)."""
    A, params, scales, radii = fit_directed_knn_weights(indices, distances, **weighting)
    return symmetrize_weights(A, params.symmetrize), params, scales, radii


def fit_directed_knn_weights(indices: Any, distances: Any, **weighting: Any
                             ) -> tuple[sp.csr_matrix, WeightParams, np.ndarray, np.ndarray]:
    """The first half of :func:`fit_knn_weights`: ``(A (n, n) directed weights, params, scales (n,), radii (n,))``;
    :func:`symmetrize_weights` ``(A, params.symmetrize)`` is W. A caller that owns the graph can free it
    in between, so that the kNN lists (``n * k`` int64 and float distances) are not alive at the
    symmetrization's peak."""
    idx, dist = check_knn_graph(indices, distances, keep_float32=True)
    n = idx.shape[0]
    if np.any(idx == np.arange(n)[:, None]):
        raise InputDataError("indices must not contain self-neighbours (row i listing i)")
    params, scales, radii = fit_weight_params(dist, **weighting)
    return directed_weight_rows(idx, dist, params, scales, scales, n), params, scales, radii


def weights_from_params(idx: np.ndarray, dist: np.ndarray, params: WeightParams, scales: np.ndarray):
    """:func:`knn_weights` once the parameters are resolved (no validation)."""
    return symmetrize_weights(directed_weight_rows(idx, dist, params, scales, scales, idx.shape[0]),
                              params.symmetrize)


def symmetrize_weights(A: sp.csr_matrix, symmetrize: str) -> sp.csr_matrix:
    """W (n, n) float64 CSR, zero diagonal, sorted indices, from directed weights ``A`` (square): ``max(A, A^T)``
    ("or"), ``min`` ("and") or the mean ("mean"); compiled (:func:`spectral.graph._weight_kernels.symmetrized_csr`:
    scipy's ``A.maximum(A.T)`` and its conversions were a large part of the weights' time)."""
    from eigenflow.spectral.graph._weight_kernels import symmetrized_csr

    A = sp.csr_matrix(A)
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()
    indptr, indices, data = symmetrized_csr(A.indptr, A.indices, A.data, A.shape[0], symmetrize)
    W = sp.csr_matrix((data, indices, indptr), shape=A.shape)
    W.has_sorted_indices = True
    return W


def directed_weight_rows(idx: np.ndarray, dist: np.ndarray, params: WeightParams, row_scales: np.ndarray,
                         scales: np.ndarray, n: int) -> sp.csr_matrix:
    """Rows ``(m, n)`` of the directed (not yet symmetrized) kNN weight matrix for the points with neighbours
    ``idx`` (m, k) at ``dist`` (m, k) and scales ``row_scales`` (m,); ``scales`` (n,) of every point."""
    from eigenflow.spectral.graph._weight_kernels import directed_csr

    m, k = idx.shape
    # int32 column indices when they fit (scipy's own choice; no int64 copy of them, ``m * k * 8`` bytes)
    index_dtype = np.int32 if n < 2**31 - 1 and m * k < 2**31 - 1 else np.int64
    indptr, indices, data = directed_csr(idx, dist, row_scales, scales, params.weighting, params.sigma, index_dtype)
    A = sp.csr_matrix((data, indices, indptr), shape=(m, n))
    A.has_canonical_format = True  # each row's columns sorted and distinct
    return A


def query_weights(
    indices: Any,
    distances: Any,
    params: WeightParams,
    scales: np.ndarray,
    radii: np.ndarray,
    *,
    return_log_scale: bool = False,
):
    """Weight rows of new points against the training graph (out-of-sample).

    A new point ``x`` gets the row it would have if it were added to the graph with the training graph
    frozen: its own ``k`` nearest training points (the first ``k`` candidates), plus, for "or" / "mean",
    the training points ``i`` that would list ``x`` among their neighbours, i.e. ``d(x, i) <= radii[i]``
    (their k-th-neighbour distance). Only the given candidates are examined: pass about ``3 k`` of them
    (a reverse neighbour further away than the last candidate is missed; the weight mass missed shrinks as
    candidates are added, and is largest on high-dimensional data, whose hubs have far reverse neighbours).
    Ties at exactly ``radii[i]`` count as neighbours. The weight values
    use the training scales ``scales[i]`` and the new point's own scale (its ``scale_k``-th candidate
    distance, floored as in training), so a training point queried with its own training neighbours as
    candidates gets exactly its training row.

    Parameters
    ----------
    indices, distances : arrays, shape (m, kc), kc >= k
        Candidate training neighbours of the m new points, sorted by distance.
    params, scales, radii
        From :func:`fit_weight_params` on the training graph.
    return_log_scale : bool
        If True, return the rows divided by ``exp(c)`` with ``c`` (m,) the largest exponent of each row, and
        ``c``: row ratios (what the normalized Nystrom formula needs) then never underflow.

    Returns
    -------
    W_new : scipy.sparse.csr_matrix, shape (m, n_train)
    log_scale : ndarray, shape (m,), only if ``return_log_scale``
    """
    n_train = scales.shape[0]
    idx, dist = check_knn_graph(indices, distances, n_samples=n_train)
    k = params.n_neighbors
    if idx.shape[1] < k:
        raise InputDataError(f"query candidates must have at least n_neighbors={k} columns; got {idx.shape[1]}")
    own = np.zeros(idx.shape, dtype=bool)
    own[:, :k] = True
    rev = dist <= radii[idx]
    mult = {"or": own | rev, "and": own & rev, "mean": 0.5 * own + 0.5 * rev}[params.symmetrize]
    mult = np.asarray(mult, dtype=np.float64)
    s_new = np.maximum(dist[:, params.scale_k - 1], params.floor)
    expo = _exponent(dist, s_new[:, None], scales[idx], params)
    shift = np.zeros(idx.shape[0])
    if return_log_scale:
        masked = np.where(mult > 0, expo, -np.inf)
        shift = np.max(masked, axis=1)
        shift[~np.isfinite(shift)] = 0.0
    vals = mult * np.exp(expo - shift[:, None])
    rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
    W = sp.csr_matrix((vals.ravel(), (rows, idx.ravel())), shape=(idx.shape[0], n_train))
    W.eliminate_zeros()
    W.sort_indices()
    return (W, shift) if return_log_scale else W


def _scales(dist: np.ndarray, params: WeightParams) -> np.ndarray:
    if params.weighting in ("local_scaling", "hein_maier"):
        return np.maximum(dist[:, params.scale_k - 1].astype(np.float64), params.floor)
    return np.ones(dist.shape[0])


def _exponent(dist: np.ndarray, s_a: np.ndarray, s_b: np.ndarray, params: WeightParams) -> np.ndarray:
    """Kernel exponent (<= 0) for distances ``dist`` between points with scales ``s_a`` and ``s_b`` (arrays
    broadcasting to ``dist``'s shape), a new float64 array. The training graph's exponents are computed by
    :func:`spectral.graph._weight_kernels.directed_csr` with the same operations in the same order."""
    out = np.array(np.broadcast_to(s_b, dist.shape), dtype=np.float64)
    if params.weighting == "heat":  # CK08 eq. 14 (sign corrected): -d^2 / sigma^2
        out.fill(params.sigma**2)
    elif params.weighting == "local_scaling":  # CK08 eq. 15 (sign corrected): -d^2 / (s_a s_b)
        np.multiply(out, s_a, out=out)
    elif params.weighting == "hein_maier":  # LQCL09, Hein & Maier weights: -d^2 / max(s_a, s_b)^2
        np.maximum(out, s_a, out=out)
        np.square(out, out=out)
    else:  # binary
        out.fill(0.0)
        return out
    np.divide(np.square(dist), out, out=out)
    return np.negative(out, out=out)
