"""The coarse problem of the two-level pieces (:mod:`._two_level`) as tasks on one Dask worker, the coarse
worker: the Galerkin pencil ``(A_c, B_c)`` (about ``coarse_size`` nodes, up to ~50 times that: see
:func:`._sharded_ops.shard_coarse_basis`), its smallest eigenvectors, its sparse LU and the coarse solves of the
two-level preconditioner stay there. The driver holds futures and the ``(P + 1,)`` coarse offsets only, so the
coarse pencil and its LU, a large share of the driver's memory if they lived there, stay off the flow process.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._sparse import spd_lu
from eigenflow.spectral.eigen.dispatch import eigensolve


def coarse_pencil(*pieces: tuple[sp.csr_matrix, sp.csr_matrix]) -> tuple[sp.csr_matrix, sp.csr_matrix, int]:
    """``(A_c (N_c, N_c), B_c (N_c, N_c), bytes received)`` from the shards' Galerkin rows
    (:func:`._sharded_ops.shard_galerkin_rows`, shard order): ``A_c`` stacked and symmetrized (it is symmetric up to
    round-off), ``B_c`` block diagonal."""
    A_c = sp.csr_matrix(sp.vstack([p[0] for p in pieces]))
    A_c = sp.csr_matrix((A_c + A_c.T) * 0.5)
    B_c = sp.csr_matrix(sp.block_diag([p[1] for p in pieces]))
    received = sum(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes for p in pieces for m in p)
    return A_c, B_c, int(received)


def coarse_eigenvectors(pencil, b: int, tol, seed: int) -> tuple[np.ndarray, dict]:
    """``(X_c (N_c, b), report)``: the ``b`` smallest eigenvectors of the pencil by
    :func:`spectral.eigen.eigensolve` (``solver="auto"``), and its size, solver, iterations and the bytes it
    received and will send."""
    A_c, B_c, received = pencil
    coarse = eigensolve(A_c, b, B=B_c, solver="auto", tol=tol, random_state=seed, raise_on_failure=False)
    X_c = np.ascontiguousarray(coarse.vectors)
    return X_c, {"coarse_n": int(A_c.shape[0]), "coarse_nnz": int(A_c.nnz), "coarse_solver": coarse.solver,
                 "coarse_iterations": coarse.n_iter, "setup_bytes": received + int(X_c.nbytes)}


class CoarseFactor:
    """The sparse LU of the shifted coarse pencil, kept on the coarse worker. A class of its own because a Dask
    worker pickles the type of every task result for the scheduler, and scipy's ``SuperLU`` type does not
    pickle (Dask would log an error for such a result and send only the type's name)."""

    def __init__(self, lu):
        self.lu = lu

    def solve(self, B: np.ndarray) -> np.ndarray:
        return self.lu.solve(B)


def coarse_factor(pencil, shift: float) -> CoarseFactor:
    """The sparse LU of ``A_c + shift B_c`` (SPD: :func:`spectral._sparse.spd_lu`), kept on the coarse worker."""
    A_c, B_c, _ = pencil
    return CoarseFactor(spd_lu(sp.csr_matrix(A_c + shift * B_c)))


def coarse_solve(lu: CoarseFactor, *restricted: np.ndarray) -> np.ndarray:
    """``(A_c + shift B_c)^-1 [T_1^T R_1; ...; T_P^T R_P]`` (N_c, b) from the shards' restrictions (c_i, b)."""
    return lu.solve(np.vstack(restricted))


def coarse_rows(result, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` (one shard's coarse nodes) of a coarse block, or of the first item of a ``(block, report)``
    pair."""
    block = result[0] if isinstance(result, tuple) else result
    return np.ascontiguousarray(block[lo:hi])
