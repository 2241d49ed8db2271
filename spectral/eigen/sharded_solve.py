"""LOBPCG on a :class:`.sharded.DistributedLaplacian`: :func:`distributed_eigensolve` and
the Laplacian eigenmap :func:`laplacian_eigenmaps_distributed`.

The operator (its shards, products, preconditioners and start blocks) is :mod:`.sharded`; where LOBPCG's
dense (n, b) work happens is ``dense_work``: ``"row_blocks"`` (:mod:`._sharded_lobpcg`, blocks as row parts on the
workers) or ``"driver"`` (scipy's lobpcg in the driver). See :mod:`.sharded` for the preconditioner and start.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from eigenflow.spectral._validation import check_choice, check_float, check_int, check_random_state
from eigenflow.spectral.eigen import _tsqr
from eigenflow.spectral.eigen._sharded_vectors import embedding_parts, finalize_sharded_vectors, gather_original_order
from eigenflow.spectral.eigen.dispatch import eigensolve
from eigenflow.spectral.eigen.sharded import DistributedLaplacian
from eigenflow.spectral.eigen.lobpcg import AMG_SHIFT
from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.errors import DisconnectedGraphError, ParameterError

#: Where LOBPCG's dense (n, b) blocks live: as row parts on the workers, or in the driver (scipy's lobpcg).
DENSE_WORK = ("row_blocks", "driver")
#: Coarse nodes (at least) of the two-level start (``start="coarse"``): each shard contributes the aggregates of
#: the deepest level of its hierarchy with >= DEFAULT_COARSE_SIZE / P nodes (about n / 20 at level 1 on kNN
#: graphs); the Galerkin pencil is solved in the driver (sparse LOBPCG + AMG above 2,000 nodes), once.
DEFAULT_COARSE_SIZE = 4000
#: Below this, the second smallest eigenvalue of L_sym means more than one graph component (the distributed
#: graph is not checked for connectivity before the solve; the zero eigenvalue's multiplicity tells).
CONNECTED_EIGENVALUE = 1e-9


def distributed_eigensolve(op: DistributedLaplacian, n_components: int, *, tol=None, max_iter=None,
                           random_state=None, preconditioner: str | None = "two_level", start: str = "auto",
                           coarse_size: int = DEFAULT_COARSE_SIZE, amg_shift: float = AMG_SHIFT, amg_options=None,
                           dense_work: str = "row_blocks", raise_on_failure: bool = True, gather: bool = True):
    """The ``n_components`` smallest eigenpairs of a :class:`DistributedLaplacian` by LOBPCG.

    ``dense_work="row_blocks"`` (default): LOBPCG's blocks stay on the workers as row parts of the shards
    (:func:`._sharded_lobpcg.row_block_lobpcg`: tsqr orthogonalizations, per-shard Gram pieces, halo products); the
    driver holds ``(3b, 3b)`` matrices only, until the converged ``(n, k)`` vectors are gathered at the end.
    ``"driver"``: scipy's ``lobpcg`` in the driver (:func:`spectral.eigen.eigensolve` with ``solver="lobpcg"``)
    on the distributed operator; its ``(n, 3b)`` blocks live in the driver. Both use the same tolerance
    (``1e-6 ||L||_inf`` absolute on every residual), iteration cap, preconditioner, start and sign rule.

    Preconditioner: ``"block_amg"`` (block Jacobi with an AMG V-cycle per shard), ``"two_level"`` (that plus
    the coarse-space correction of :meth:`DistributedLaplacian.add_coarse_correction`, needs
    ``start="coarse"``) or None. Start block: ``"coarse"`` (:meth:`DistributedLaplacian.coarse_start` with
    ``coarse_size`` coarse nodes; needs the preconditioner), ``"random"``
    (:meth:`DistributedLaplacian.random_start`) or ``"auto"`` (coarse with the preconditioner, else random).
    ``tol``, ``max_iter``, ``random_state``, ``raise_on_failure`` mean what they mean in
    :func:`spectral.eigen.eigensolve`.

    ``gather=False`` (row blocks only) leaves the vectors on the workers: see Returns.

    Returns
    -------
    EigenResult
        ``values (k,)``, ``vectors (n, k)`` in the ORIGINAL node order (unit norm, sign-fixed), residuals
        ``||L v - lambda v||`` computed with the distributed product; ``info["traffic"]`` (bytes moved,
        total and per iteration), ``info["distributed"]`` (shards, inside fraction, timings, ``dense_work``).
        With ``gather=False``: ``(EigenResult with vectors=None, row parts)``, the vectors as futures of
        ``(n_i, k)`` in shard order on the shards' workers (their rows are ``op.original_rows()``).
    """
    if not isinstance(op, DistributedLaplacian):
        raise ParameterError(f"op must be a DistributedLaplacian; got {type(op).__name__}")
    if preconditioner is not None:
        preconditioner = check_choice("preconditioner", preconditioner, ("block_amg", "two_level"))
    k = check_int("n_components", n_components, low=1, high=op.shape[0] - 1)
    start = check_choice("start", start, ("auto", "coarse", "random"))
    dense_work = check_choice("dense_work", dense_work, DENSE_WORK)
    if not isinstance(gather, bool) or (not gather and dense_work == "driver"):
        raise ParameterError(f"gather must be True, or False with dense_work='row_blocks' (the driver path holds "
                             f"the vectors in the driver); got gather={gather!r}, dense_work={dense_work!r}")
    if start == "auto":
        start = "coarse" if preconditioner else "random"
    if start == "coarse" and not preconditioner:
        raise ParameterError("start='coarse' needs the block AMG preconditioner (preconditioner='block_amg' or "
                             "'two_level'); got preconditioner=None")
    if preconditioner == "two_level" and start != "coarse":
        raise ParameterError(
            f"preconditioner='two_level' needs start='coarse' (its coarse space); got start={start!r}")
    coarse_size = check_int("coarse_size", coarse_size, low=1)
    rng = check_random_state(random_state)
    timings = {}
    t = time.perf_counter()
    M = op.block_preconditioner(amg_shift=amg_shift, amg_options=amg_options) if preconditioner else None
    timings["preconditioner_setup"] = time.perf_counter() - t
    t = time.perf_counter()
    coarse_report = None
    if start == "coarse":
        X0, coarse_report = op.coarse_start(k, coarse_size, tol=tol, random_state=rng)
    else:
        X0 = op.random_start(k, rng)
    if preconditioner == "two_level":
        op.add_coarse_correction(amg_shift)
    timings["start"] = time.perf_counter() - t
    before = dict(op.traffic)
    t = time.perf_counter()
    if dense_work == "driver":
        X0 = _tsqr.gather_rows(op.client, X0)
        op.traffic["start_bytes"] = X0.nbytes
        res = eigensolve(op, k, solver="lobpcg", tol=tol, max_iter=max_iter, random_state=rng,
                         raise_on_failure=raise_on_failure, preconditioner=M, X0=X0)
        res = dataclasses.replace(res, vectors=sign_flip(op.to_original_order(res.vectors)))
        parts = None
    else:
        res, parts = _row_block_solve(op, k, X0, tol=tol, max_iter=max_iter, preconditioned=M is not None,
                                      raise_on_failure=raise_on_failure)
    timings["solve"] = time.perf_counter() - t
    info = dict(res.info)
    info["traffic"] = _traffic(op, before, res.n_iter)
    info["distributed"] = {**op.stats, "seconds": timings, "preconditioner": preconditioner or "none",
                           "start": start, "coarse": coarse_report, "dense_work": dense_work}
    res = dataclasses.replace(res, info=info)
    if parts is None:
        return res
    if not gather:
        return res, parts
    vectors = gather_original_order(op, parts)
    res.info["gathered_bytes"] = vectors.nbytes
    return dataclasses.replace(res, vectors=vectors)


def _row_block_solve(op, k: int, X0: list, *, tol, max_iter, preconditioned: bool, raise_on_failure: bool):
    """:func:`._sharded_lobpcg.row_block_lobpcg` on ``op`` from the row parts ``X0``, its ``k`` pairs finalized on
    the workers (normalized, sorted, sign-fixed, residuals, convergence:
    :func:`._sharded_vectors.finalize_sharded_vectors`, the steps of ``_result.finalize``). Returns ``(EigenResult with vectors=None, row parts (n_i, k))``."""
    from eigenflow.spectral.eigen._problem import Problem
    from eigenflow.spectral.eigen._result import DEFAULT_RTOL, RawPairs
    from eigenflow.spectral.eigen._sharded_lobpcg import row_block_lobpcg
    from eigenflow.spectral.eigen.lobpcg import DEFAULT_MAX_ITER

    norm = op.norm_bound()
    tol = None if tol is None else check_float("tol", tol, low=0.0, low_inclusive=False)
    max_iter = DEFAULT_MAX_ITER if max_iter is None else check_int("max_iter", max_iter, low=1)
    lobpcg_tol = DEFAULT_RTOL * (norm or 1.0) if tol is None else tol
    pairs = row_block_lobpcg(op, X0, k, tol=lobpcg_tol, max_iter=max_iter, precondition=preconditioned)
    final = pairs.residual_history[-1]
    info = {"block_size": k, "lobpcg_tol": lobpcg_tol, "max_iter": max_iter, "restarts": pairs.restarts,
            "dropped_columns": pairs.dropped_columns, "householder_fallbacks": pairs.householder_fallbacks,
            "gathered_bytes": 0}
    raw = RawPairs(pairs.values, pairs.parts, n_iter=pairs.n_iter,
                   solver_converged=bool(np.all(final <= lobpcg_tol)), info=info)
    problem = Problem(op, None, op.shape[0], k, "smallest", tol, max_iter, None, bool(raise_on_failure), norm, None)
    return finalize_sharded_vectors(op, raw, problem, "lobpcg")


def laplacian_eigenmaps_distributed(op: DistributedLaplacian, n_components: int, *, gather: bool = True,
                                    **solver_options):
    """Laplacian eigenmap on the distributed operator, as
    :func:`spectral.embedding.eigenmaps.laplacian_eigenmaps_from_graph` (``normalization="symmetric"``): the ``k + 1``
    smallest pairs, ``f_j = D^-1/2 u_j`` sign-fixed, the trivial pair 0 dropped. Returns ``(embedding (n, k),
    eigenvalues (k,), EigenResult)`` in the original node order; with ``gather=False`` (row blocks) the embedding stays
    on the workers: row parts, futures of ``(n_i, k)`` in shard order (:func:`._sharded_vectors.embedding_parts`), and the EigenResult has ``vectors=None``."""
    if op.stats.get("normalization") != "symmetric":
        raise ParameterError(f"the embedding needs normalization='symmetric'; got {op.stats.get('normalization')!r}")
    if op.stats.get("isolated_nodes"):
        raise ParameterError(f"the graph has {op.stats['isolated_nodes']} isolated nodes: embed per component")
    k = check_int("n_components", n_components, low=1, high=max(1, op.shape[0] - 2))
    row_blocks = solver_options.get("dense_work", "row_blocks") == "row_blocks"
    out = distributed_eigensolve(op, k + 1, gather=gather and not row_blocks, **solver_options)
    res, parts = out if row_blocks else (out, None)
    if res.values[1] < CONNECTED_EIGENVALUE:
        raise DisconnectedGraphError(
            f"the graph has more than one connected component (second eigenvalue {res.values[1]:.2e} < "
            f"{CONNECTED_EIGENVALUE:g}); the distributed solver embeds connected graphs only: use more neighbours "
            "or embed per component with the single-process solver")
    if parts is None:
        deg = op.to_original_order(op.degrees[:, None]).ravel()
        return sign_flip(res.vectors / np.sqrt(deg)[:, None])[:, 1:], res.values[1:], res
    embedding = embedding_parts(op, parts)
    if not gather:
        return embedding, res.values[1:], res
    Z, vectors = gather_original_order(op, embedding), gather_original_order(op, parts)
    res.info["gathered_bytes"] = Z.nbytes + vectors.nbytes
    return Z, res.values[1:], dataclasses.replace(res, vectors=vectors)


def _traffic(op, before, n_iter) -> dict:
    """Traffic of one solve: the counters' increments, ``driver_bytes`` (blocks between the driver and the
    workers: products and preconditioner calls with driver-held blocks), ``halo_bytes`` (rows between workers in the
    row-block products), ``coarse_bytes`` (the two-level preconditioner's coarse blocks, between the shards and the
    coarse worker), their sum
    ``total_bytes`` and per iteration."""
    now = op.traffic
    delta = {key: now[key] - before.get(key, 0) for key in now if key != "start_bytes"}
    driver = delta["product_bytes_out"] + delta["product_bytes_back"] + delta["preconditioner_bytes"]
    moved = driver + delta["halo_bytes"] + delta["coarse_bytes"]
    return {**delta, "driver_bytes": driver, "total_bytes": moved, "start_bytes": now.get("start_bytes", 0),
            "bytes_per_iteration": moved / max(n_iter, 1),
            "driver_bytes_per_iteration": driver / max(n_iter, 1),
            "products_per_iteration": delta["products"] / max(n_iter, 1)}
