"""Two-level pieces of :mod:`.distributed`: the start blocks and the coarse-space correction.

The coarse space is ``T = blockdiag(T_i)``, ``T_i`` the ``D^1/2``-weighted aggregates of shard ``i``'s AMG
hierarchy (:func:`._shards.shard_coarse_basis`); the Galerkin pencil ``(T^T L T, T^T T)`` is assembled from
per-shard rows and kept (and factorized) in the driver. Every function takes the
:class:`.distributed.DistributedLaplacian` ``op`` and records its traffic in ``op.traffic``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._sparse import spd_lu
from .._validation import check_random_state
from ..errors import ParameterError
from ..partition_parts import item
from . import _shards
from ._cluster import scatter_to, shape_of
from ._tsqr import orthonormal
from .dispatch import eigensolve


def add_coarse_correction(op, shift: float) -> None:
    """Make the block preconditioner two-level additive Schwarz: ``M = blockdiag(M_ii) + T A_c^-1 T^T``
    with the coarse space of :meth:`coarse_start` (call it first) and ``A_c + shift B_c`` factorized
    (sparse LU ordered as a Cholesky factorization, :func:`spectral._sparse.spd_lu`: the matrix is SPD) in the
    driver. Per application: ``(n_i, b)`` out, ``(c_i, b)`` back, ``(c_i, b)`` out, ``(n_i, b)`` back per shard
    (two round trips)."""
    if op._coarse is None:
        raise ParameterError("preconditioner='two_level' needs the coarse space of start='coarse'")
    A_c, B_c, offsets = op._coarse
    op._coarse_lu = (spd_lu(A_c + shift * B_c), offsets)


def precondition_two_level_parts(op, parts: list) -> list:
    """``M R`` for the two-level preconditioner on a block held as row parts (futures of (n_i, b), shard
    order, on the shards' workers): per shard ``M_ii R_i`` and ``T_i^T R_i`` in one task, the coarse solve in
    the driver (``(c_i, b)`` back and out per shard), then ``+ T_i Z_i`` on the shard. Returns the futures of
    the ``(n_i, b)`` rows of ``M R`` on the same workers."""
    c = op.client
    lu, offsets = op._coarse_lu
    pairs = [c.submit(_shards.shard_precondition_two_level, shard, part, workers=[worker], pure=False)
             for shard, worker, part in zip(op.shards, op.workers, parts)]
    Y = np.vstack(c.gather([c.submit(item, p, 1, workers=[w], pure=False)
                            for p, w in zip(pairs, op.workers)]))
    Z = lu.solve(Y)
    op.traffic["preconditioner_bytes"] += Y.nbytes + Z.nbytes
    return [c.submit(_shards.shard_add_coarse, p, shard, scatter_to(c, Z[lo:hi], worker), workers=[worker],
                     pure=False)
            for p, shard, worker, lo, hi in zip(pairs, op.shards, op.workers, offsets[:-1], offsets[1:])]


def random_start(op, b: int, random_state=None) -> list:
    """An orthonormal ``(n, b)`` start block as row parts (futures of (n_i, b) on the shards' workers):
    standard normal rows drawn per shard on the workers (seeds spawned from ``random_state``),
    orthonormalized by tall-skinny QR over the row blocks (:func:`orthonormal`)."""
    rng = check_random_state(random_state)
    seeds = np.random.SeedSequence(int(rng.integers(0, 2**63 - 1))).spawn(op.n_blocks)
    parts = [op.client.submit(_shards.shard_random_block, int(m), b, s, workers=[w], pure=False)
             for m, s, w in zip(np.diff(op.bounds), seeds, op.workers)]
    return orthonormal(op.client, parts, op.workers)[0]


def coarse_start(op, b: int, coarse_size: int, *, tol=None, random_state=None) -> tuple[list, dict]:
    """A two-level start block ``(n, b)`` as row parts (futures of (n_i, b) on the shards' workers): the
    smallest eigenvectors of the Galerkin pencil ``(T^T L T, T^T T)`` on the block-diagonal coarse space
    ``T = blockdiag(T_i)`` of the aggregates of the shards' AMG hierarchies (:func:`._shards.shard_coarse_basis`,
    each ``T_i`` at the deepest level with at least ``coarse_size / P`` nodes), prolongated on the workers and
    orthonormalized by TSQR (:func:`orthonormal`). The single-process solver's multilevel start
    (:mod:`._multilevel`) with one coarse level instead of a cascade; the coarse pencil (about ``coarse_size``
    nodes, sparse) is solved in the driver by :func:`spectral.eigen.eigensolve`.
    Needs :meth:`block_preconditioner` first. Returns ``(parts, report)``."""
    if not op._preconditioned:
        raise ParameterError("start='coarse' needs the block AMG preconditioner (preconditioner='block_amg')")
    c = op.client
    per_shard = max(1, coarse_size // op.n_blocks)
    op.shards = [c.submit(_shards.shard_coarse_basis, s, per_shard, workers=[w], pure=False)
                   for s, w in zip(op.shards, op.workers)]
    bases = [c.submit(_shards.shard_basis, s, workers=[w], pure=False) for s, w in zip(op.shards, op.workers)]
    sizes = c.gather([c.submit(shape_of, t, pure=False) for t in bases])
    offsets = np.concatenate([[0], np.cumsum([s[1] for s in sizes])]).astype(np.int64)
    pieces = c.gather([c.submit(_shards.shard_galerkin_rows, s, bases, op.bounds, offsets, workers=[w],
                                pure=False) for s, w in zip(op.shards, op.workers)])
    A_c = sp.csr_matrix(sp.vstack([p[0] for p in pieces]))
    A_c = sp.csr_matrix((A_c + A_c.T) * 0.5)  # symmetric up to round-off already
    B_c = sp.csr_matrix(sp.block_diag([p[1] for p in pieces]))
    coarse = eigensolve(A_c, b, B=B_c, solver="auto", tol=tol, random_state=random_state, raise_on_failure=False)
    X_c = coarse.vectors
    op._coarse = (A_c, B_c, offsets)
    parts = [c.submit(_shards.shard_prolongate, s, X_c[lo:hi], workers=[w], pure=False)
             for s, w, lo, hi in zip(op.shards, op.workers, offsets[:-1], offsets[1:])]
    report = {"coarse_n": int(offsets[-1]), "coarse_nnz": int(A_c.nnz), "coarse_solver": coarse.solver,
              "coarse_iterations": coarse.n_iter,
              "setup_bytes": int(sum(p[0].data.nbytes + p[0].indices.nbytes + p[0].indptr.nbytes
                                     for p in pieces) + X_c.nbytes)}
    return orthonormal(c, parts, op.workers)[0], report
