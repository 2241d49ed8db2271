"""Two-level pieces of :mod:`.sharded`: the start blocks and the coarse-space correction.

The coarse space is ``T = blockdiag(T_i)``, ``T_i`` the ``D^1/2``-weighted aggregates of shard ``i``'s AMG
hierarchy (:func:`._sharded_ops.shard_coarse_basis`); the Galerkin pencil ``(T^T L T, T^T T)`` is assembled from
per-shard rows, solved, factorized and kept on one worker, the coarse worker (the first shard's,
:mod:`._coarse`); the driver holds futures only. Every function takes the
:class:`.sharded.DistributedLaplacian` ``op`` and records its traffic in ``op.traffic``.
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral._validation import check_random_state, seed_int
from eigenflow.spectral.eigen import _coarse, _sharded_ops
from eigenflow.spectral.eigen._sharded_ops import FLOAT_BYTES
from eigenflow.spectral.eigen._tsqr import orthonormal
from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.placement import item
from eigenflow.spectral.placement import least_loaded_worker, shape_of


def add_coarse_correction(op, shift: float) -> None:
    """Make the block preconditioner two-level additive Schwarz: ``M = blockdiag(M_ii) + T A_c^-1 T^T``
    with the coarse space of :meth:`coarse_start` (call it first) and ``A_c + shift B_c`` factorized
    (sparse LU ordered as a Cholesky factorization, :func:`spectral._sparse.spd_lu`: the matrix is SPD) on the
    coarse worker, which then keeps the factor only. Per application: ``(c_i, b)`` from each shard to the coarse
    worker and back (between workers; nothing passes through the driver)."""
    if op._coarse is None:
        raise ParameterError("preconditioner='two_level' needs the coarse space of start='coarse'")
    pencil, offsets, worker = op._coarse
    op._coarse_lu = (op.client.submit(_coarse.coarse_factor, pencil, shift, workers=[worker], pure=False),
                     offsets, worker)
    op._coarse = None  # the pencil is freed on the coarse worker once factorized (another shift: coarse_start again)


def precondition_two_level_parts(op, parts: list, width: int) -> list:
    """``M R`` for the two-level preconditioner on a block held as row parts (futures of (n_i, width), shard
    order, on the shards' workers): per shard ``M_ii R_i`` and ``T_i^T R_i`` in one task, the coarse solve on the
    coarse worker (``(c_i, width)`` there and back per shard), then ``+ T_i Z_i`` on the shard. Returns the
    futures of the ``(n_i, width)`` rows of ``M R`` on the same workers; the driver waits for none of them."""
    c = op.client
    lu, offsets, coarse_worker = op._coarse_lu
    pairs = [c.submit(_sharded_ops.shard_precondition_two_level, shard, part, workers=[worker], pure=False)
             for shard, worker, part in zip(op.shards, op.workers, parts)]
    restricted = [c.submit(item, p, 1, workers=[w], pure=False) for p, w in zip(pairs, op.workers)]
    Z = c.submit(_coarse.coarse_solve, lu, *restricted, workers=[coarse_worker], pure=False)
    op.traffic["coarse_bytes"] += 2 * int(offsets[-1]) * width * FLOAT_BYTES
    return [c.submit(_sharded_ops.shard_add_coarse, p, shard,
                     c.submit(_coarse.coarse_rows, Z, int(lo), int(hi), workers=[coarse_worker], pure=False),
                     workers=[worker], pure=False)
            for p, shard, worker, lo, hi in zip(pairs, op.shards, op.workers, offsets[:-1], offsets[1:])]


def random_start(op, b: int, random_state=None) -> list:
    """An orthonormal ``(n, b)`` start block as row parts (futures of (n_i, b) on the shards' workers):
    standard normal rows drawn per shard on the workers (seeds spawned from ``random_state``),
    orthonormalized by tall-skinny QR over the row blocks (:func:`orthonormal`)."""
    rng = check_random_state(random_state)
    seeds = np.random.SeedSequence(int(rng.integers(0, 2**63 - 1))).spawn(op.n_blocks)
    parts = [op.client.submit(_sharded_ops.shard_random_block, int(m), b, s, workers=[w], pure=False)
             for m, s, w in zip(np.diff(op.bounds), seeds, op.workers)]
    return orthonormal(op.client, parts, op.workers)[0]


def coarse_start(op, b: int, coarse_size: int, *, tol=None, random_state=None) -> tuple[list, dict]:
    """A two-level start block ``(n, b)`` as row parts (futures of (n_i, b) on the shards' workers): the
    smallest eigenvectors of the Galerkin pencil ``(T^T L T, T^T T)`` on the block-diagonal coarse space
    ``T = blockdiag(T_i)`` of the aggregates of the shards' AMG hierarchies (:func:`._sharded_ops.shard_coarse_basis`,
    each ``T_i`` at the deepest level with at least ``coarse_size / P`` nodes), prolongated on the workers and
    orthonormalized by TSQR (:func:`orthonormal`). The single-process solver's multilevel start
    (:mod:`._multilevel`) with one coarse level instead of a cascade; the coarse pencil (about ``coarse_size``
    nodes, sparse) is assembled and solved on the coarse worker (:mod:`._coarse`) by
    :func:`spectral.eigen.eigensolve`.
    Needs :meth:`block_preconditioner` first. Returns ``(parts, report)``."""
    if not op._preconditioned:
        raise ParameterError("start='coarse' needs the block AMG preconditioner (preconditioner='block_amg')")
    c = op.client
    per_shard = max(1, coarse_size // op.n_blocks)
    op.shards = [c.submit(_sharded_ops.shard_coarse_basis, s, per_shard, workers=[w], pure=False)
                   for s, w in zip(op.shards, op.workers)]
    bases = [c.submit(_sharded_ops.shard_basis, s, workers=[w], pure=False) for s, w in zip(op.shards, op.workers)]
    sizes = c.gather([c.submit(shape_of, t, pure=False) for t in bases])
    offsets = np.concatenate([[0], np.cumsum([s[1] for s in sizes])]).astype(np.int64)
    pieces = [c.submit(_sharded_ops.shard_galerkin_rows, s, bases, op.bounds, offsets, workers=[w], pure=False)
              for s, w in zip(op.shards, op.workers)]
    coarse_worker = least_loaded_worker(c, op.workers, np.diff(op.bounds))
    if coarse_worker is None:
        raise ParameterError("the distributed.Client has no running workers")
    pencil = c.submit(_coarse.coarse_pencil, *pieces, workers=[coarse_worker], pure=False)
    seed = seed_int(check_random_state(random_state))
    solved = c.submit(_coarse.coarse_eigenvectors, pencil, b, tol, seed, workers=[coarse_worker], pure=False)
    op._coarse = (pencil, offsets, coarse_worker)
    parts = [c.submit(_sharded_ops.shard_prolongate, s,
                      c.submit(_coarse.coarse_rows, solved, int(lo), int(hi), workers=[coarse_worker], pure=False),
                      workers=[w], pure=False)
             for s, w, lo, hi in zip(op.shards, op.workers, offsets[:-1], offsets[1:])]
    report = dict(c.submit(item, solved, 1, pure=False).result(), coarse_worker=coarse_worker)
    return orthonormal(c, parts, op.workers)[0], report
