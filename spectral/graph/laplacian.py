"""Graph Laplacians and connectivity checks: the one Laplacian builder of the package.

(No top-level module is named ``laplacian``, so that the function :func:`laplacian` is exported as
``spectral.laplacian``.) Sparse (:func:`laplacian`, CSR) for kNN graphs of any size; dense
(:func:`dense_laplacian`) for the methods whose graphs are dense n x n arrays (NSSE, LFDA's W^bet).

With ``W`` symmetric non-negative (n, n) and degrees ``d = W 1``, ``D = diag(d)``:

- ``"unnormalized"``: ``L = D - W``;
- ``"symmetric"``: ``L_sym = I - D^-1/2 W D^-1/2`` (eigenvalues in [0, 2]);
- ``"random_walk"``: ``L_rw = I - D^-1 W`` (not symmetric; same eigenvalues as L_sym, eigenvectors
  ``D^-1/2 u``).

Isolated nodes (degree 0) have an all-zero row and column in every Laplacian (``D^-1/2`` and ``D^-1`` are
taken as 0 there, scipy.sparse.csgraph's convention for ``normed=True`` would put 1 on the diagonal): they
contribute the eigenvalue 0 and never produce NaN or inf.

Signed graphs (``signed=True``, unnormalized only): the difference graphs of the discriminant methods
(DNE's ``W^I - W^E``, LFDA's ``W^bet`` with its ``-1/n`` entries, CK08 Sect. 2.1.2) have negative
weights; ``L = D - W`` (eq. 3) is still their quadratic form ``sum_ij w_ij (z_i - z_j)^2 / 2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from eigenflow.spectral._sparse import drop_diagonal, max_asymmetry, row_blocks, row_of_entries
from eigenflow.spectral._validation import check_choice
from eigenflow.spectral.errors import DisconnectedGraphError, InputDataError, ParameterError

NORMALIZATIONS = ("unnormalized", "symmetric", "random_walk")

#: Relative tolerance of the symmetry check of W: |W - W^T| <= SYMMETRY_RTOL * max|W|.
SYMMETRY_RTOL = 1e-10


def check_affinity(W: Any, name: str = "W", *, signed: bool = False) -> sp.csr_matrix:
    """Validate a square, symmetric, finite affinity matrix (non-negative unless ``signed``); float64 CSR."""
    if sp.issparse(W):
        M = sp.csr_matrix(W, dtype=np.float64)
    else:
        arr = np.asarray(W)
        if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
            raise InputDataError(f"{name} must be a numeric matrix; got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise InputDataError(f"{name} must be a 2-D square matrix; got shape {arr.shape}")
        M = sp.csr_matrix(arr.astype(np.float64))
    if M.shape[0] != M.shape[1] or M.shape[0] < 1:
        raise InputDataError(f"{name} must be a non-empty square matrix; got shape {M.shape}")
    if not np.all(np.isfinite(M.data)):
        raise InputDataError(f"{name} contains NaN or inf values")
    if not signed and M.nnz and M.data.min() < 0:
        raise InputDataError(f"{name} must be non-negative; smallest entry is {M.data.min()}")
    scale = float(np.abs(M.data).max()) if M.nnz else 0.0
    asym = max_asymmetry(M)
    if asym > SYMMETRY_RTOL * max(scale, 1e-300):
        raise InputDataError(f"{name} must be symmetric; max |{name} - {name}^T| = {asym:.3g}")
    return M


def laplacian(W: Any, normalization: str = "unnormalized", *, signed: bool = False) -> tuple[sp.csr_matrix, np.ndarray]:
    """Graph Laplacian of a symmetric affinity matrix (sparse).

    Parameters
    ----------
    W : array or sparse matrix, shape (n, n)
        Symmetric weights, non-negative unless ``signed``; the diagonal is ignored (self-loops removed).
    normalization : {"unnormalized", "symmetric", "random_walk"}
    signed : bool
        Allow negative weights (difference graphs, module docstring); only with "unnormalized".

    Returns
    -------
    L : scipy.sparse.csr_matrix, shape (n, n), float64
    degrees : ndarray, shape (n,)
        ``d_i = sum_j W_ij`` (self-loops excluded).
    """
    normalization = check_choice("normalization", normalization, NORMALIZATIONS)
    _check_signed(signed, normalization)
    W = check_affinity(W, signed=signed)
    return _laplacian(W, normalization)


def dense_laplacian(W: Any, *, signed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalized ``L = D - W`` (CK08 eq. 3, OV19 eq. 9-10) of a dense symmetric W.

    Parameters
    ----------
    W : ndarray, shape (n, n)
        Symmetric finite weights with a zero diagonal, non-negative unless ``signed``.
    signed : bool
        Allow negative weights.

    Returns
    -------
    L : ndarray, shape (n, n), float64
    degrees : ndarray, shape (n,)
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 1:
        raise InputDataError(f"W must be a non-empty square matrix; got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise InputDataError("W contains NaN or inf values")
    if not signed and W.min() < 0:
        raise InputDataError(f"W must be non-negative (or pass signed=True); smallest entry is {W.min()}")
    scale = float(np.abs(W).max())
    if np.abs(W - W.T).max() > SYMMETRY_RTOL * max(scale, 1e-300):
        raise InputDataError(f"W must be symmetric; max |W - W^T| = {np.abs(W - W.T).max():.3g}")
    degrees = W.sum(axis=1)
    return np.diag(degrees) - W, degrees


def _check_signed(signed: bool, normalization: str) -> None:
    if signed and normalization != "unnormalized":
        raise ParameterError(
            f"signed=True (negative weights) needs normalization='unnormalized'; got {normalization!r}"
        )


def _laplacian(W: sp.csr_matrix, normalization: str) -> tuple[sp.csr_matrix, np.ndarray]:
    # entrywise on the CSR arrays, by row blocks (no setdiag, no diagonal-matrix products, no copy of W when it
    # is clean): the build holds W, L and one row block's temporaries
    W = _without_self_loops(W)
    degrees = np.asarray(W.sum(axis=1)).ravel()
    if normalization == "unnormalized":
        return _assemble_rows(W, 0, degrees, None, None), degrees
    return _normalized_rows(W, degrees, 0, normalization), degrees


def _without_self_loops(W: sp.csr_matrix) -> sp.csr_matrix:
    """``W`` itself when it stores no diagonal entry, no explicit zero and sorted indices; else a cleaned copy
    (the caller's matrix is never modified)."""
    if W.has_sorted_indices and not W.diagonal().any() and (W.nnz == 0 or np.all(W.data != 0)):
        return W
    W = sp.csr_matrix(W, dtype=np.float64, copy=True)
    W.sort_indices()
    return drop_diagonal(W)


def laplacian_rows(W_rows: Any, degrees: np.ndarray, row_offset: int,
                   normalization: str = "symmetric") -> sp.csr_matrix:
    """Rows ``[row_offset, row_offset + m)`` of a normalized Laplacian, from the same rows of ``W``.

    The row-block form of :func:`laplacian` (same formula, same isolated-node convention) for a graph held
    as row blocks on several workers (:mod:`spectral.eigen.sharded`): each block needs its own rows of
    ``W`` and the degrees of every node it links to.

    Parameters
    ----------
    W_rows : sparse matrix, shape (m, n)
        Rows ``row_offset .. row_offset + m - 1`` of a symmetric non-negative ``W``; self-loops (entries at
        column ``row_offset + r`` of row ``r``) are ignored.
    degrees : ndarray, shape (n,)
        ``d = W 1`` of the whole graph (self-loops excluded).
    row_offset : int
        Index of the first row of the block.
    normalization : {"symmetric", "random_walk"}

    Returns
    -------
    L_rows : scipy.sparse.csr_matrix, shape (m, n), float64, sorted indices
    """
    normalization = check_choice("normalization", normalization, ("symmetric", "random_walk"))
    W = sp.csr_matrix(W_rows, dtype=np.float64, copy=True)
    W.sum_duplicates()  # sorted indices, as the assembly needs
    rows = row_of_entries(W) + row_offset
    W.data[rows == W.indices] = 0.0  # self-loops are ignored (drop_diagonal of an offset block)
    W.eliminate_zeros()
    return _normalized_rows(W, np.asarray(degrees, dtype=np.float64), int(row_offset), normalization)


def _normalized_rows(W: sp.csr_matrix, degrees: np.ndarray, row_offset: int, normalization: str) -> sp.csr_matrix:
    """``(I - D^-1/2 W D^-1/2)`` or ``(I - D^-1 W)`` restricted to the rows of ``W`` (m, n), no self-loops."""
    m, n = W.shape
    inv = np.zeros(n)
    pos = degrees > 0
    if normalization == "symmetric":
        inv[pos] = 1.0 / np.sqrt(degrees[pos])
        column_scale = inv
    else:
        inv[pos] = 1.0 / degrees[pos]
        column_scale = None
    return _assemble_rows(W, row_offset, pos[row_offset:row_offset + m].astype(np.float64),
                          inv[row_offset:row_offset + m], column_scale)


def _assemble_rows(W: sp.csr_matrix, row_offset: int, diagonal: np.ndarray, row_scale: np.ndarray | None,
                   column_scale: np.ndarray | None) -> sp.csr_matrix:
    """``diag(diagonal) - diag(row_scale) W diag(column_scale)`` on the rows of ``W`` (m, n): a CSR matrix with
    sorted indices, each row's diagonal entry (column ``row_offset + r``) stored where ``diagonal`` is nonzero.

    ``W`` must have sorted indices and no entry on that diagonal (:func:`_without_self_loops`); a scale of None
    is 1. The arrays of the result are written by row blocks, so the temporaries stay at
    :data:`spectral._sparse.ROW_BLOCK` rows' entries: the build needs W, L and one block's temporaries, not a copy
    of W plus ``(nnz,)`` row numbers, scaled values and the ``eye - S`` sum.
    """
    m, n = W.shape
    stored = diagonal != 0
    inserted = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(stored, out=inserted[1:])  # diagonal entries in the rows before each row
    nnz = W.nnz + int(inserted[-1])
    index_dtype = np.int32 if max(nnz, n) < np.iinfo(np.int32).max else np.int64
    indptr = (W.indptr + inserted).astype(index_dtype)
    indices = np.empty(nnz, dtype=index_dtype)
    data = np.empty(nnz)
    for r0, r1 in row_blocks(m):
        lo, hi = int(W.indptr[r0]), int(W.indptr[r1])
        rows = row_of_entries(W, r0, r1)
        cols = W.indices[lo:hi]
        values = -W.data[lo:hi]
        if row_scale is not None:
            values *= row_scale[rows]
        if column_scale is not None:
            values *= column_scale[cols]
        below = cols < rows + row_offset  # entries left of the diagonal keep their place in the row
        target = np.arange(lo, hi) + inserted[rows] + (stored[rows] & ~below)
        indices[target] = cols
        data[target] = values
        own = np.flatnonzero(stored[r0:r1]) + r0
        left = np.bincount(rows[below] - r0, minlength=r1 - r0)[own - r0]
        indices[indptr[own] + left] = own + row_offset
        data[indptr[own] + left] = diagonal[own]
    L = sp.csr_matrix((data, indices, indptr), shape=(m, n))
    L.has_sorted_indices = True
    return L


def connected_components(W: Any) -> tuple[int, np.ndarray]:
    """Connected components of the graph of a symmetric affinity matrix.

    Returns
    -------
    n_components : int
    labels : ndarray of int64, shape (n,)
        Component of each node, numbered by decreasing size (0 = largest; ties by smallest node index).
    """
    W = check_affinity(W)
    return _components(W)


def _components(W: sp.csr_matrix) -> tuple[int, np.ndarray]:
    n_comp, labels = csgraph.connected_components(W, directed=False)
    sizes = np.bincount(labels, minlength=n_comp)
    first = np.full(n_comp, labels.shape[0])
    np.minimum.at(first, labels, np.arange(labels.shape[0]))
    order = np.lexsort((first, -sizes))  # by size desc, then first node
    relabel = np.empty(n_comp, dtype=np.int64)
    relabel[order] = np.arange(n_comp)
    return int(n_comp), relabel[labels]


def check_connected(W: Any) -> None:
    """Raise :class:`DisconnectedGraphError` (with the component sizes) unless the graph is connected."""
    n_comp, labels = connected_components(W)
    if n_comp > 1:
        sizes = np.bincount(labels)
        shown = ", ".join(str(s) for s in sizes[:10]) + (", ..." if n_comp > 10 else "")
        raise DisconnectedGraphError(
            f"the graph has {n_comp} connected components (sizes {shown}); it must be connected. "
            "Increase n_neighbors, use symmetrize='or', or embed per component"
        )
