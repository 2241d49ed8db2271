"""Vectors that stay on the workers: the finalize of the row-block LOBPCG and the eigenmap's scaling, per shard.

The row-block solver (:mod:`._sharded_lobpcg`) leaves its Ritz vectors as row parts, futures of ``(n_i, b)`` in
shard order on the shards' workers. :func:`finalize_sharded_vectors` does to them what :func:`._result.finalize`
does to an ``(n, b)`` array, with reductions of ``(b,)`` per-shard results only:

1. unit 2-norm columns (per-shard sums of squares);
2. the pairs sorted (:func:`._result.pair_order`) and cut to ``k``;
3. the sign rule of :func:`.signs.sign_flip`, in the ORIGINAL node order: every shard reports, per column, its
   largest |.| entry, its value and the smallest original row holding it (:func:`_column_peaks`); the driver
   takes the largest, ties to the smallest original row, exactly as ``np.argmax`` on the gathered columns;
4. residuals ``||L v - lambda v||`` with the distributed product (:meth:`DistributedLaplacian.product_parts`);
5. tolerance and convergence by :func:`._result.conclude`.

:func:`embedding_parts` is the eigenmap's ``f_j = D^-1/2 u_j`` (sign-fixed, trivial column dropped) on the parts,
each shard scaling by the degrees of its own rows (held by its :class:`spectral.graph.sharded.Shard`). Nothing of size n
passes through the driver; :func:`gather_original_order` brings parts back as one ``(n, k)`` array when asked.
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.eigen import _tsqr
from eigenflow.spectral.eigen._result import RawPairs, conclude, pair_order
from eigenflow.spectral.eigen._sharded_lobpcg import _Blocks, _residual_squares


def finalize_sharded_vectors(op, raw: RawPairs, problem, solver: str = "lobpcg"):
    """Steps 1-5 of the module docstring on ``raw`` (values ``(b,)``, vectors: row parts of ``(n_i, b)``).
    Returns ``(EigenResult with vectors=None, row parts of the k final vectors (n_i, k))``."""
    blocks = _Blocks(op.client, op.workers)
    values = np.asarray(raw.values, dtype=np.float64)
    norms = np.sqrt(blocks.sum(blocks.map(_column_squares, raw.vectors)))
    norms[norms == 0] = 1.0
    order = pair_order(values, problem.which)[: problem.k]
    values = values[order]
    parts = blocks.map(_columns_scaled, raw.vectors, const=(order, 1.0 / norms[order]))
    parts = signed_parts(op, parts)
    residuals = np.sqrt(blocks.sum(blocks.map(_residual_squares, parts, op.product_parts(parts, order.size),
                                              const=values)))
    result = conclude(values, None, residuals, raw, problem, solver)
    return result, parts


def signed_parts(op, parts: list) -> list:
    """The parts with every column's sign fixed by :func:`.signs.sign_flip`'s rule on the gathered columns in the
    original node order (see the module docstring, step 3)."""
    blocks = _Blocks(op.client, op.workers)
    peaks = np.array(op.client.gather(blocks.map(_column_peaks, parts, op.original_rows())))  # (P, 3, k)
    size, value, row = peaks[:, 0], peaks[:, 1], peaks[:, 2]
    winner = np.lexsort((row, -size), axis=0)[0]  # per column: largest |.|, then smallest original row
    signs = np.sign(value[winner, np.arange(value.shape[1])])
    signs[signs == 0] = 1.0
    return blocks.map(_columns_scaled, parts, const=(np.arange(signs.size), signs))


def embedding_parts(op, parts: list) -> list:
    """``D^-1/2 u_j`` for the unit eigenvectors ``u`` (row parts (n_i, k + 1), the trivial one first), signs fixed,
    the trivial column dropped: row parts of the embedding ``(n_i, k)``."""
    blocks = _Blocks(op.client, op.workers)
    scaled = signed_parts(op, blocks.map(_divided_by_sqrt_degrees, parts, op.shards))
    return blocks.map(_without_first_column, scaled)


def gather_original_order(op, parts: list) -> np.ndarray:
    """The row parts as one ``(n, k)`` array in the original node order (in the driver)."""
    return op.to_original_order(_tsqr.gather_rows(op.client, parts))


# ------------------------------------------------------------------------------- worker side (per shard)

def _column_squares(V: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->j", V, V)


def _columns_scaled(V: np.ndarray, order_scale: tuple) -> np.ndarray:
    """``V[:, order] * scale``."""
    order, scale = order_scale
    return V[:, order] * scale


def _column_peaks(V: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``(3, k)``: per column the largest |.| of the shard's rows, the value there and the smallest original row
    ``rows`` (n_i,) holding that |.| (a shard without rows reports -1, 0, 0)."""
    out = np.zeros((3, V.shape[1]))
    out[0] = -1.0
    if not V.shape[0]:
        return out
    A = np.abs(V)
    top = A.max(axis=0)
    for j in range(V.shape[1]):
        at = np.flatnonzero(A[:, j] == top[j])
        i = at[np.argmin(rows[at])]
        out[:, j] = top[j], V[i, j], rows[i]
    return out


def _divided_by_sqrt_degrees(U: np.ndarray, shard) -> np.ndarray:
    return U / np.sqrt(shard.degrees)[:, None]


def _without_first_column(V: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(V[:, 1:])
