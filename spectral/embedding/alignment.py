"""Alignment of a refit's embedding to the previous model's on the rows both hold.

An eigensolver returns each eigenvector up to its sign, and the eigenvectors of (nearly) equal eigenvalues up
to any rotation inside their group; a refit on more or different rows also rescales the coordinates (the
degrees change). :func:`align_embedding` finds the orthogonal ``R (k, k)`` and scale ``s > 0`` minimizing
``||s Y R - Y_ref||_F`` over the shared rows, so that rows whose data did not change keep their place, and
:meth:`AlignedEmbedding.apply` maps the refit's other rows the same way.

No translation is fitted (the embeddings are not re-centred): spectral coordinates are meaningful around the
origin (a Laplacian eigenmap is D-orthogonal to the constant vector, a kernel embedding is centred by its
kernel), so a shift would only absorb differences between the two row sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import orthogonal_procrustes

from eigenflow.spectral._validation import check_array_2d, check_float
from eigenflow.spectral.errors import InputDataError

__all__ = ["AlignedEmbedding", "align_embedding", "eigenvalue_groups"]


@dataclass(frozen=True, eq=False)
class AlignedEmbedding:
    """The map ``Z -> s Z R`` that aligns a refit's embedding to the previous one (:func:`align_embedding`).

    Attributes
    ----------
    rotation : ndarray (k, k), float64
        Orthogonal ``R`` (rotation or reflection); block-diagonal over ``groups`` when eigenvalues were given.
    scale : float
        Least-squares ``s > 0``.
    groups : list of (start, stop)
        The column ranges ``R`` may mix; one group ``(0, k)`` without eigenvalues.
    residual : float
        Median over the shared rows of ``||s Y_i R - Y_ref_i||``, divided by the spread of ``Y_ref`` (the
        root-mean-square norm of its rows, ``sqrt(mean_i ||Y_ref_i||^2)``): 0 for a perfect match.
    unaligned_residual : float
        The same figure for ``Y`` itself (no rotation, no scale), to compare with ``residual``.
    """

    rotation: np.ndarray
    scale: float
    groups: list[tuple[int, int]]
    residual: float
    unaligned_residual: float

    def apply(self, Z: Any) -> np.ndarray:
        """``s Z R`` for rows ``Z (m, k)`` of the new embedding (e.g. rows the previous model did not hold).

        Computed in float64; float32 input gives float32 output, anything else float64.
        """
        Z = check_array_2d(Z, "Z", min_rows=0, dtype=(np.float64, np.float32))
        k = self.rotation.shape[0]
        if Z.shape[1] != k:
            raise InputDataError(f"Z must have {k} columns (the aligned embedding's); got shape {Z.shape}")
        out = self.scale * (Z.astype(np.float64, copy=False) @ self.rotation)
        return out.astype(Z.dtype, copy=False)


def eigenvalue_groups(eigenvalues: np.ndarray, group_tol: float) -> list[tuple[int, int]]:
    """Column ranges ``(start, stop)`` of consecutive eigenvalues ``(k,)`` closer than ``group_tol``.

    ``l_i`` and ``l_{i+1}`` fall in one group when ``|l_{i+1} - l_i| / max(|l_i|, tiny) <= group_tol``
    (``tiny`` the smallest positive float64): inside such a group any rotation of the eigenvectors is an
    equally valid solution, across groups only their signs are free.
    """
    vals = np.asarray(eigenvalues, dtype=np.float64)
    tiny = np.finfo(np.float64).tiny
    gaps = np.abs(np.diff(vals)) / np.maximum(np.abs(vals[:-1]), tiny)
    cuts = [0, *(int(i) + 1 for i in np.flatnonzero(gaps > group_tol)), vals.shape[0]]
    return list(zip(cuts[:-1], cuts[1:]))


def align_embedding(Y: Any, Y_ref: Any, *, eigenvalues: Any = None, group_tol: float = 1e-3) -> AlignedEmbedding:
    """Orthogonal ``R`` and scale ``s`` minimizing ``||s Y R - Y_ref||_F`` (no translation, module docstring).

    Parameters
    ----------
    Y : array-like, shape (n, k)
        The new embedding of the rows both models hold.
    Y_ref : array-like, shape (n, k)
        The previous embedding of the same rows, in the same order.
    eigenvalues : array-like, shape (k,), or None
        The eigenvalues of ``Y``'s columns. Given, ``R`` is block-diagonal over the groups of close eigenvalues
        (:func:`eigenvalue_groups`; a group of one column gets a sign ``+-1``), the freedom the eigenproblem
        leaves; None: one full ``k x k`` orthogonal Procrustes.
    group_tol : float >= 0
        Relative eigenvalue gap up to which consecutive eigenvalues form one group.

    Returns
    -------
    AlignedEmbedding
        ``R`` (scipy's ``orthogonal_procrustes`` per group), ``s = trace((Y R)^T Y_ref) / ||Y||_F^2`` (the
        least-squares scale for that ``R``, which does not depend on ``s``), the groups and the residuals.
    """
    Y, Y_ref = check_array_2d(Y, "Y"), check_array_2d(Y_ref, "Y_ref")
    if Y.shape != Y_ref.shape:
        raise InputDataError(
            f"Y and Y_ref must have the same shape (n, k), the same rows in the same order; got Y {Y.shape} "
            f"and Y_ref {Y_ref.shape}"
        )
    group_tol = check_float("group_tol", group_tol, low=0.0)
    n, k = Y.shape
    if eigenvalues is None:
        groups = [(0, k)]
    else:
        try:
            vals = np.asarray(eigenvalues, dtype=np.float64)
        except (TypeError, ValueError):
            vals = None
        if vals is None or vals.shape != (k,) or not np.isfinite(vals).all():
            got = (f"{eigenvalues!r:.80}" if vals is None
                   else f"shape {vals.shape}: {np.array2string(vals, threshold=8)}")
            raise InputDataError(f"eigenvalues must be {k} finite values, one per column of Y {Y.shape}; got {got}")
        groups = eigenvalue_groups(vals, group_tol)
    norm_Y = float(np.sum(Y * Y))
    spread = float(np.sqrt(np.sum(Y_ref * Y_ref) / n))
    if norm_Y == 0.0 or spread == 0.0:
        name, shape = ("Y", Y.shape) if norm_Y == 0.0 else ("Y_ref", Y_ref.shape)
        raise InputDataError(f"{name} {shape} is all zeros: there is nothing to align")
    R = np.zeros((k, k))
    for start, stop in groups:
        if stop - start == 1:  # a single eigenvector: only its sign is free
            R[start, start] = 1.0 if float(Y[:, start] @ Y_ref[:, start]) >= 0.0 else -1.0
        else:
            R[start:stop, start:stop] = orthogonal_procrustes(Y[:, start:stop], Y_ref[:, start:stop])[0]
    YR = Y @ R
    cross = float(np.sum(YR * Y_ref))
    if cross <= 0.0:
        raise InputDataError(
            f"Y {Y.shape} and Y_ref {Y_ref.shape} have no correlated column within the eigenvalue groups "
            f"{groups} (trace((Y R)^T Y_ref) = {cross}): no positive scale aligns them"
        )
    scale = cross / norm_Y
    residual = float(np.median(np.linalg.norm(scale * YR - Y_ref, axis=1))) / spread
    unaligned = float(np.median(np.linalg.norm(Y - Y_ref, axis=1))) / spread
    return AlignedEmbedding(rotation=R, scale=scale, groups=groups, residual=residual, unaligned_residual=unaligned)
