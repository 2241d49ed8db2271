"""LNEG's local regressions (STG18 eq. 25-30) as Dask tasks over row chunks, neighbour rows gathered.

Each task receives only what its chunk needs: the chunk's own rows Y (b, D), the rows of the union of
its neighbourhoods X[u] (|u|, D) (u = the sorted unique neighbour indices of the chunk) and the
neighbour indices remapped to positions in u (b, k). It runs exactly the arithmetic of
:func:`spectral.methods.graph_kpca.lneg_weights.local_weights_chunk` on the same values, so with the same chunk
boundaries the result equals the in-memory computation bit for bit. X may be a numpy array or a Dask
array (n, D) (then the chunks are its row chunks and the gathers stay lazy until the tasks run).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._arrays import is_dask
from eigenflow.spectral._validation import check_int
from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.methods.graph_kpca.lneg_weights import local_weights_chunk


def row_bounds(n: int, X=None, chunk_rows: int | None = None) -> list[tuple[int, int]]:
    """Chunk boundaries [(i0, i1), ...]: X's row chunks for a Dask array, else ``chunk_rows`` rows each."""
    if chunk_rows is None and X is not None and is_dask(X):
        edges = np.cumsum((0,) + tuple(X.chunks[0]))
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    step = check_int("chunk_rows", chunk_rows, low=1)
    return [(i0, min(n, i0 + step)) for i0 in range(0, n, step)]


def _chunk_task(Y, nb_rows, local_ind, degree, l1, reg, expansion, max_iter, tol):
    """One chunk: coefficients (b, k, P) of the points Y (b, D) on their neighbours nb_rows[local_ind]."""
    Y = np.asarray(Y, dtype=np.float64)
    return local_weights_chunk(np.asarray(nb_rows, dtype=np.float64), local_ind, 0, Y.shape[0], degree=degree,
                               l1=l1, reg=reg, expansion=expansion, max_iter=max_iter, tol=tol, centers=Y)


def local_weights_gathered(X, ind, *, degree, l1, reg, expansion, chunk_rows=None, max_iter=500, tol=1e-7):
    """Coefficients (n, k, P) of every point, one ``dask.delayed`` task per row chunk (active scheduler).

    Parameters
    ----------
    X : ndarray or dask array (n, D); ind : int array (n, k), neighbours of each point (no self).
    degree, l1, reg, expansion, max_iter, tol : as :func:`spectral.methods.graph_kpca.lneg_weights.local_weights`.
    chunk_rows : rows per task; None with a Dask X uses X's row chunks.

    Returns
    -------
    coef : (n, k, P); n_iter : the largest FISTA iteration count of a chunk (0 for l1 = 0).
    """
    import dask

    n = X.shape[0]
    ind = np.asarray(ind)
    if ind.ndim != 2 or ind.shape[0] != n:
        raise InputDataError(f"ind must be an (n, k) array with n = {n}; got shape {ind.shape}")
    tasks = []
    for i0, i1 in row_bounds(n, X, chunk_rows):
        u, local = np.unique(ind[i0:i1], return_inverse=True)
        local = local.reshape(i1 - i0, -1)
        Y, nb = X[i0:i1], X[u]  # lazy slices of a Dask X; small copies of a numpy X
        if is_dask(X):
            Y, nb = dask.delayed(Y), dask.delayed(nb)
        tasks.append(dask.delayed(_chunk_task)(Y, nb, local, degree, l1, reg, expansion, max_iter, tol))
    results = dask.compute(*tasks)
    return np.concatenate([r[0] for r in results], axis=0), max(r[1] for r in results)


def weight_matrix(coef: np.ndarray, ind: np.ndarray) -> sp.csr_matrix:
    """The sparse N x N matrix W of LNEG, W_ij = w_ij[1] (the linear coefficients), from coef (n, k, P)."""
    n, k = ind.shape
    return sp.csr_matrix((coef[:, :, 0].ravel(), (np.repeat(np.arange(n), k), ind.ravel())), shape=(n, n))
