"""A row-block distributed normalized Laplacian and LOBPCG on it.

The graph is held as ``P`` row blocks ("shards") on the workers of the active ``distributed.Client``;
every shard builds its rows of ``L_sym = I - D^-1/2 W D^-1/2`` (the formula of
:func:`spectral.graph.laplacian.laplacian_rows`, same conventions as the single-process path) and keeps
them there. :class:`DistributedLaplacian` is a ``LinearOperator`` whose product ``L @ V`` (n, b) sends each
shard only ``V[cols_i]`` (the rows its columns touch) and receives its ``(n_i, b)`` rows back.

:func:`.sharded_solve.distributed_eigensolve` runs LOBPCG on that operator (same tolerance
``1e-6 ||L||_inf`` as the single-process solver, iteration cap, convergence check, residuals and sign rule) with

- a **block-diagonal preconditioner** (``"block_amg"``: block Jacobi / additive Schwarz without overlap):
  each shard builds pyamg's smoothed-aggregation hierarchy of its diagonal block ``L_ii`` (+ the AMG shift)
  and applies the block V-cycle of :mod:`._block_amg` to its own rows, on its worker. ``"two_level"``
  (default) adds the coarse correction ``T A_c^-1 T^T`` (two-level additive Schwarz) on the coarse space
  below: block Jacobi alone loses the global smooth modes across the cuts, so its iteration count grows with
  ``P``; the coarse space carries those modes across the shards and keeps the count close to the
  single-process solver's;
- a **start block**: ``"coarse"`` (default) the smallest eigenvectors of the Galerkin pencil on
  ``T = blockdiag(T_i)``, ``T_i`` the ``D^1/2``-weighted aggregates of shard ``i``'s hierarchy (the pencil,
  ``~coarse_size`` nodes, is assembled from per-shard rows and solved on one worker, ``_coarse``), or ``"random"``
  (drawn per shard); either is prolongated / drawn on the workers and orthonormalized by
  tall-skinny QR over the row blocks (:func:`._tsqr.orthonormal`), and stays there as row parts.

Where the dense work happens (``dense_work``): ``"row_blocks"`` (default, :mod:`._sharded_lobpcg`) keeps every
``(n, b)`` block of LOBPCG as row parts on the shards' workers: products by halo exchange between workers,
orthonormalization by Cholesky-QR2 with a TSQR fallback, Gram matrices as sums of per-shard pieces; only the
converged ``(n, k)`` vectors are gathered at the end. ``"driver"`` runs scipy's LOBPCG in the driver, which keeps
``X, R, P`` (n, b) and their products there and sends each shard ``V[cols_i]`` per product.
``info["traffic"]`` counts the bytes moved.

The shards should keep most edges inside a shard (block Jacobi then approximates ``L^-1`` well): build
with ``partition="rcm"`` (graph only) or ``"coordinates"`` (principal-direction bisection of ``X`` or of an
initial embedding); ``op.stats["inside_fraction"]`` reports the fraction of edges inside shards.
The operator works in the partition order; :func:`.sharded_solve.distributed_eigensolve` returns vectors in
the caller's original node order.
"""

from __future__ import annotations


import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from eigenflow.spectral._validation import check_choice, check_float, check_int, check_workers
from eigenflow.spectral.eigen import _sharded_ops, _two_level
from eigenflow.spectral.eigen._sharded_ops import FLOAT_BYTES
from eigenflow.spectral.eigen.lobpcg import AMG_SHIFT
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.graph import sharded as graph_shards
from eigenflow.spectral.graph.halo import sizes_of, values_at_columns
from eigenflow.spectral.graph.laplacian import check_affinity
from eigenflow.spectral.graph.sharded import transpose_exchange
from eigenflow.spectral.placement import is_future, item, scatter_to, shape_of, worker_list, worker_of

PARTITIONS = _sharded_ops.PARTITIONS
NORMALIZATIONS = ("symmetric", "random_walk")
SYMMETRIZE = ("or", "and", "mean")
#: A shard needs at least this many rows: enough for a useful AMG hierarchy of its diagonal block and for
#: its (rows, b) blocks to outweigh the scheduler's fixed per-task overhead.
MIN_SHARD_ROWS = 64


def active_client(client):
    """``client``, or the active ``distributed.Client`` (ParameterError when there is none)."""
    if client is not None:
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError as exc:
        raise ParameterError("the distributed eigensolver needs an active distributed.Client (or client=...)") from exc


class DistributedLaplacian(LinearOperator):
    """Normalized Laplacian (n, n) held as row shards on Dask workers; ``op @ V`` is a distributed product.

    Build with :meth:`from_weights` (a scipy ``W`` in the driver, partitioned and scattered),
    :meth:`from_blocks` (row blocks of W, e.g. futures already on the workers) or :meth:`from_knn_blocks`
    (per-shard kNN lists: weights built on the workers). The degrees and weight scales are exchanged between
    the workers (:func:`spectral.graph.halo.values_at_columns`): each shard receives those of its own columns,
    and nothing of size n passes through the driver. Attributes: ``n_blocks``, ``bounds`` (P + 1,) shard boundaries in
    the operator's order, ``stats`` (sizes, ``inside_fraction``), ``traffic`` (bytes and calls so far); gathered into
    the driver only when asked for: ``perm`` (n,) original node of each operator row, ``degrees`` (n,) in the operator's
    order, ``cols`` (the columns of every shard, for the driver's product).
    """

    def __init__(self, shards, bounds, rows, client, stats):
        self.client = client
        self.shards = list(shards)
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.workers = [worker_of(client, f) for f in self.shards]
        self.stats = dict(stats)
        self.traffic = {"products": 0, "product_bytes_out": 0, "product_bytes_back": 0,
                        "preconditioner_calls": 0, "preconditioner_bytes": 0, "coarse_bytes": 0, "halo_bytes": 0}
        self._preconditioned = False
        self._coarse = None
        self._coarse_lu = None
        self._halo_rows = None
        self._cols = None
        self._original_rows = rows  # None: the identity
        n = int(self.bounds[-1])
        super().__init__(np.dtype(np.float64), (n, n))

    @property
    def perm(self) -> np.ndarray:
        """``(n,)`` the original node of each operator row (gathered from the shards' workers)."""
        if self._original_rows is None:
            return np.arange(self.shape[0], dtype=np.int64)
        return np.concatenate(self.client.gather(self._original_rows)).astype(np.int64, copy=False)

    @property
    def degrees(self) -> np.ndarray:
        """``(n,)`` the degrees in the operator's order (gathered from the shards)."""
        return np.concatenate(self.client.gather([self.client.submit(graph_shards.shard_degrees_of, s, workers=[w],
                                                                     pure=False)
                                                  for s, w in zip(self.shards, self.workers)]))

    @property
    def cols(self) -> list:
        """Per shard its sorted global columns ``(c_i,)`` (gathered once, for the driver's product)."""
        if self._cols is None:
            self._cols = self.client.gather([self.client.submit(graph_shards.shard_columns, s, workers=[w], pure=False)
                                             for s, w in zip(self.shards, self.workers)])
        return self._cols

    # ------------------------------------------------------------------------------------------ builders
    @classmethod
    def from_weights(cls, W, n_blocks: int, *, partition: str = "rcm", coordinates=None,
                     normalization: str = "symmetric", client=None) -> DistributedLaplacian:
        """Partition a symmetric ``W`` (n, n) into ``n_blocks`` row shards, scatter them and build the operator.

        ``partition``: "rcm", "coordinates" (needs ``coordinates`` (n, d): the data or an initial
        embedding) or "none" (see :mod:`._sharded_ops`).
        """
        W = check_affinity(W)
        n = W.shape[0]
        n_blocks = check_n_blocks(n_blocks, n)
        partition = check_choice("partition", partition, PARTITIONS)
        if partition == "coordinates":
            coordinates = _check_coordinates(coordinates, n)
        elif coordinates is not None:
            raise ParameterError(f"coordinates are used only by partition='coordinates'; got partition={partition!r}")
        client = active_client(client)
        perm, bounds = _sharded_ops.row_partition(W, n_blocks, partition, coordinates)
        inside = _sharded_ops.inside_fraction(W, perm, bounds)
        Wp = sp.csr_matrix(W[perm][:, perm])
        Wp.sort_indices()
        addresses = check_workers(worker_list(client))
        blocks = [scatter_to(client, Wp[bounds[i]:bounds[i + 1]], addresses[i % len(addresses)])
                  for i in range(n_blocks)]
        op = cls._build(blocks, bounds, _rows_on(client, perm, bounds, blocks), normalization, client)
        op.stats.update(partition=partition, inside_fraction_W=inside)
        return op

    @classmethod
    def from_blocks(cls, blocks, *, symmetrize: str | None = None, check_symmetric: bool = True,
                    normalization: str = "symmetric", perm=None, client=None) -> DistributedLaplacian:
        """Build from row blocks ``W[b_i:b_{i+1}]`` (each (n_i, n), CSR or futures of CSR on the workers).

        ``symmetrize`` ("or", "and", "mean"; None = W is already symmetric) symmetrizes directed kNN
        weights by the shard-pair transpose exchange: shard ``j`` sends shard ``i`` the columns of its rows
        that fall in shard ``i`` (only those), and shard ``i`` assembles its rows of ``W^T``.
        ``check_symmetric`` (with ``symmetrize=None``) checks ``W = W^T`` by the same exchange.
        The row order of the blocks is the operator's order; ``perm`` gives the original node of each of its
        rows (None: the identity), for :meth:`to_original_order`: an (n,) permutation, or per block a future of
        its rows' original nodes (on the block's worker; not checked here).
        """
        client = active_client(client)
        blocks = list(blocks)
        if not blocks:
            raise ParameterError("blocks must hold at least one row block; got 0")
        addresses = check_workers(worker_list(client))
        futures = [b if is_future(b) else scatter_to(client, sp.csr_matrix(b, dtype=np.float64),
                                                       addresses[i % len(addresses)])
                   for i, b in enumerate(blocks)]
        shapes = client.gather([client.submit(shape_of, f, pure=False) for f in futures])
        n = shapes[0][1]
        if any(s[1] != n for s in shapes) or sum(s[0] for s in shapes) != n:
            raise InputDataError(f"row blocks must be (n_i, n) with sum n_i = n; got shapes {shapes}")
        _check_block_rows([s[0] for s in shapes], n)
        bounds = np.concatenate([[0], np.cumsum([s[0] for s in shapes])]).astype(np.int64)
        if symmetrize is not None:
            symmetrize = check_choice("symmetrize", symmetrize, SYMMETRIZE)
        rows = perm if perm is None or isinstance(perm, list) else _rows_on(client, _check_perm(perm, n), bounds,
                                                                            futures)
        if symmetrize is not None or check_symmetric:
            futures = transpose_exchange(client, futures, bounds, symmetrize)
        op = cls._build(futures, bounds, rows, normalization, client)
        op.stats.update(partition="given", symmetrize=symmetrize)
        return op

    @classmethod
    def from_knn_blocks(cls, indices, distances, *, weighting: str = "local_scaling", symmetrize: str = "or",
                        sigma: float | None = None, scale_k: int | None = None, normalization: str = "symmetric",
                        perm=None, client=None) -> DistributedLaplacian:
        """Build from per-shard kNN lists: weights, symmetrization and Laplacian all on the workers.

        ``indices[i]`` / ``distances[i]`` (arrays or futures, (n_i, k)) are the neighbours (global row numbers)
        and sorted distances of the rows of shard ``i``, shards in row order. The weighting is
        :func:`spectral.graph.weights.knn_weights`'s (same parameters, resolved from the reduced summaries of all
        blocks: smallest positive and mean distance); each shard receives the per-point scales of its columns
        from the other shards' workers (like the degrees, :func:`spectral.graph.halo.values_at_columns`); the directed
        weight rows are symmetrized by the shard-pair transpose exchange of :meth:`from_blocks`. Same result as
        ``from_blocks`` on the row blocks of ``knn_weights``.

        ``perm`` (None: the identity) says which rows the shards hold: an (n,) permutation (shard ``i`` holds the
        original rows ``perm[s_i:s_i + n_i]``, ``s_i`` the rows of the shards before it), or per shard a future of
        its original rows (ascending, on any worker: no (n,) array in the driver). The neighbour indices are
        original row numbers; they are renumbered into the operator's order on the workers, each shard asking
        the others only for its foreign neighbours (:func:`spectral.graph.sharded.renumber_by_parts`). ``op.perm`` and
        :meth:`to_original_order` map the operator's rows back. Use the shards of a locality partition
        (:mod:`spectral.neighbours.partition`).
        """
        from eigenflow.spectral.graph.weights import resolve_weight_params

        client = active_client(client)
        indices, distances = list(indices), list(distances)
        if not indices or len(indices) != len(distances):
            raise ParameterError(f"indices and distances must be lists of the same number (>= 1) of row blocks; got "
                                 f"{len(indices)} and {len(distances)}")
        addresses = check_workers(worker_list(client))
        idx = [b if is_future(b) else scatter_to(client, np.asarray(b), addresses[i % len(addresses)])
               for i, b in enumerate(indices)]
        workers = [worker_of(client, f) for f in idx]
        dist = [b if is_future(b) else scatter_to(client, np.asarray(b, dtype=np.float64), w)
                for b, w in zip(distances, workers)]
        rows = client.gather([client.submit(shape_of, f, pure=False) for f in idx])
        n = sum(r[0] for r in rows)
        _check_block_rows([r[0] for r in rows], n)
        starts = np.concatenate([[0], np.cumsum([r[0] for r in rows])]).astype(np.int64)
        part_rows = None
        if perm is not None:
            part_rows = perm if isinstance(perm, list) else _rows_on(client, _check_perm(perm, n), starts, idx)
            if len(part_rows) != len(idx):
                raise ParameterError(f"perm must give the rows of each of the {len(idx)} blocks; got {len(part_rows)}")
            idx = graph_shards.renumber_by_parts(client, idx, part_rows, starts, workers)
        summaries = client.gather([client.submit(graph_shards.knn_summary, a, d, int(s), n, workers=[w], pure=False)
                                   for a, d, s, w in zip(idx, dist, starts, workers)])
        ks = {m["k"] for m in summaries}
        if len(ks) != 1:
            raise InputDataError(f"every kNN block must have the same number of neighbours; got {sorted(ks)}")
        positives = [m["min_positive"] for m in summaries if m["min_positive"] is not None]
        mean = sum(m["sum"] for m in summaries) / sum(m["count"] for m in summaries)
        params = resolve_weight_params(ks.pop(), weighting=weighting, symmetrize=symmetrize, sigma=sigma,
                                       scale_k=scale_k, min_positive=min(positives) if positives else None,
                                       mean_distance=mean)
        scales = [client.submit(graph_shards.knn_scales, d, params, workers=[w], pure=False)
                  for d, w in zip(dist, workers)]
        cols = [client.submit(graph_shards.knn_columns, a, int(s), workers=[w], pure=False)
                for a, s, w in zip(idx, starts, workers)]
        col_scales = values_at_columns(client, scales, cols, starts, workers)
        directed = [client.submit(graph_shards.knn_directed_rows, a, d, int(s), params, cc, sc, n, workers=[w],
                                  pure=False) for a, d, s, cc, sc, w in zip(idx, dist, starts, cols, col_scales, workers)]
        W = transpose_exchange(client, directed, starts, params.symmetrize)
        # no reference is kept to the intermediates, so the scheduler frees each once the tasks using it are done
        # (kept, they would all be alive at the build's peak on a worker: kNN lists, renumbered lists, directed
        # and symmetrized weights, and the Laplacian rows)
        del idx, dist, scales, cols, col_scales, directed
        op = cls._build(W, starts, part_rows, normalization, client)
        op.stats.update(partition="given", symmetrize=params.symmetrize, weight_params=params.to_attrs())
        return op

    @classmethod
    def _build(cls, blocks, bounds, rows, normalization, client) -> DistributedLaplacian:
        normalization = check_choice("normalization", normalization, NORMALIZATIONS)
        workers = [worker_of(client, f) for f in blocks]
        starts = [int(s) for s in bounds[:-1]]
        degrees = [client.submit(graph_shards.shard_degrees, f, s, workers=[w], pure=False)
                   for f, s, w in zip(blocks, starts, workers)]
        cols = [client.submit(graph_shards.block_columns, f, s, workers=[w], pure=False)
                for f, s, w in zip(blocks, starts, workers)]
        col_degrees = values_at_columns(client, degrees, cols, bounds, workers)
        shards = [client.submit(graph_shards.shard_build, f, s, cc, dc, normalization, workers=[w], pure=False)
                  for f, s, cc, dc, w in zip(blocks, starts, cols, col_degrees, workers)]
        per = client.gather([client.submit(graph_shards.shard_stats, s, workers=[w], pure=False)
                             for s, w in zip(shards, workers)])
        offdiag = sum(p["offdiag"] for p in per)
        stats = {"n": int(bounds[-1]), "n_blocks": len(shards), "normalization": normalization,
                 "shard_rows": [p["rows"] for p in per], "shard_columns": [p["columns"] for p in per],
                 "nnz": sum(p["nnz"] for p in per), "norm_inf": max(p["norm_inf"] for p in per),
                 "inside_fraction": sum(p["inside"] for p in per) / offdiag if offdiag else 1.0,
                 "isolated_nodes": sum(p["isolated"] for p in per)}
        return cls(shards, bounds, rows, client, stats)

    # ----------------------------------------------------------------------------------------- products
    @property
    def n_blocks(self) -> int:
        return len(self.shards)

    def norm_bound(self) -> float:
        """``||L||_inf`` (max absolute row sum over all shards), as the single-process solver's bound."""
        return float(self.stats["norm_inf"])

    def _matvec(self, x):
        return self._matmat(np.asarray(x).reshape(-1, 1)).ravel()

    def _matmat(self, V):
        V = np.ascontiguousarray(V, dtype=np.float64)
        c = self.client
        futures = []
        for shard, worker, cols in zip(self.shards, self.workers, self.cols):
            piece = scatter_to(c, V[cols], worker)
            futures.append(c.submit(_sharded_ops.shard_product, shard, piece, workers=[worker], pure=False))
            self.traffic["product_bytes_out"] += cols.size * V.shape[1] * FLOAT_BYTES
        out = np.vstack(c.gather(futures))
        self.traffic["products"] += 1
        self.traffic["product_bytes_back"] += out.nbytes
        return out

    def block_preconditioner(self, *, amg_shift: float = AMG_SHIFT, amg_options=None) -> LinearOperator:
        """Block Jacobi ``M = blockdiag(M_ii)`` with ``M_ii`` the AMG V-cycle of shard ``i``'s diagonal
        block, built and applied on the shard's worker (see module docstring)."""
        amg_shift = check_float("amg_shift", amg_shift, low=0.0)
        c = self.client
        self.shards = [c.submit(_sharded_ops.shard_with_preconditioner, s, amg_shift, amg_options, workers=[w],
                                pure=False) for s, w in zip(self.shards, self.workers)]
        for shard in self.shards:  # wait, and raise setup errors here (the shards stay on their workers)
            worker_of(c, shard)
        self._preconditioned = True
        self._coarse = self._coarse_lu = None  # a new hierarchy: any earlier coarse space is stale
        n = self.shape[0]
        return LinearOperator((n, n), matvec=lambda r: self._precondition(r).ravel(), matmat=self._precondition,
                              dtype=np.float64)

    def add_coarse_correction(self, shift: float = AMG_SHIFT) -> None:
        """Turn the block preconditioner into two-level additive Schwarz (:func:`._two_level.add_coarse_correction`)."""
        _two_level.add_coarse_correction(self, shift)

    def random_start(self, b: int, random_state=None) -> list:
        """Orthonormal random ``(n, b)`` start block as row parts on the workers (:func:`._two_level.random_start`)."""
        return _two_level.random_start(self, b, random_state)

    def coarse_start(self, b: int, coarse_size: int, *, tol=None, random_state=None) -> tuple[list, dict]:
        """Two-level start block ``(n, b)`` as row parts, and a report (:func:`._two_level.coarse_start`)."""
        return _two_level.coarse_start(self, b, coarse_size, tol=tol, random_state=random_state)

    def _precondition(self, R):
        """``M R`` for a block ``R`` (n, b) in the driver: its rows sent to the shards, the result gathered."""
        R = np.ascontiguousarray(np.asarray(R).reshape(self.shape[0], -1), dtype=np.float64)
        c = self.client
        parts = [scatter_to(c, R[lo:hi], w) for w, lo, hi in zip(self.workers, self.bounds[:-1], self.bounds[1:])]
        out = np.vstack(c.gather(self.precondition_parts(parts, R.shape[1])))
        self.traffic["preconditioner_bytes"] += R.nbytes + out.nbytes
        return out

    def precondition_parts(self, parts: list, width: int) -> list:
        """``M R`` for a block held as row parts (futures of (n_i, width), shard order, on the shards' workers):
        each shard applies its V-cycle to its own rows (block Jacobi: no traffic), plus the coarse correction
        of the two-level preconditioner (``(c_i, width)`` to the coarse worker and back). Futures of
        ``(n_i, width)``."""
        self.traffic["preconditioner_calls"] += 1
        if self._coarse_lu is not None:
            return _two_level.precondition_two_level_parts(self, parts, width)
        c = self.client
        return [c.submit(_sharded_ops.shard_precondition, shard, part, workers=[worker], pure=False)
                for shard, worker, part in zip(self.shards, self.workers, parts)]

    def product_parts(self, parts: list, width: int) -> list:
        """``L @ V`` for ``V`` (n, width) held as row parts (futures of (n_i, width), shard order, on the shards'
        workers): shard ``j`` sends shard ``i`` only its rows at shard ``i``'s columns (a halo exchange between
        workers; nothing passes through the driver). Futures of the ``(n_i, width)`` rows of the product."""
        c = self.client
        out = []
        for i, (shard, worker) in enumerate(zip(self.shards, self.workers)):
            pieces = [parts[j] if j == i else
                      c.submit(_sharded_ops.take_rows, parts[j], rows, workers=[self.workers[j]], pure=False)
                      for j, rows in self._halo()[i]]
            out.append(c.submit(_sharded_ops.shard_product_pieces, shard, pieces, workers=[worker], pure=False))
        self.traffic["products"] += 1
        self.traffic["halo_bytes"] += self.stats["halo_rows"] * width * FLOAT_BYTES
        return out

    def _halo(self) -> list:
        """Per shard ``i``: ``[(j, rows of shard j at shard i's columns (future on j's worker, or None for i))]``
        in shard order, cut on the workers once (:func:`spectral.graph.halo.split_by_owner`)."""
        if self._halo_rows is None:
            c = self.client
            requests = [c.submit(_sharded_ops.shard_requests, s, self.bounds, workers=[w], pure=False)
                        for s, w in zip(self.shards, self.workers)]
            sizes = np.array(c.gather([c.submit(sizes_of, r, pure=False) for r in requests]))
            halo = []
            for i, req in enumerate(requests):
                halo.append([(j, None if j == i else
                              c.submit(item, req, j, workers=[self.workers[j]], pure=False))
                             for j in range(len(requests)) if j == i or sizes[i, j]])
            self._halo_rows, self.stats["halo_rows"] = halo, int(sizes.sum() - np.trace(sizes))
        return self._halo_rows

    def original_rows(self) -> list:
        """Per shard, the original node numbers ``(n_i,)`` of its rows, futures on the shard's worker (the identity:
        made there once)."""
        if self._original_rows is None:
            self._original_rows = [self.client.submit(np.arange, lo, hi, dtype=np.int64, workers=[w], pure=False)
                                   for w, lo, hi in zip(self.workers, self.bounds[:-1], self.bounds[1:])]
        return self._original_rows

    def to_original_order(self, V: np.ndarray) -> np.ndarray:
        """Rows of ``V`` (n, k), in the operator's order, put back in the original node order."""
        out = np.empty_like(V)
        out[self.perm] = V
        return out


def _rows_on(client, perm: np.ndarray, bounds: np.ndarray, blocks: list) -> list:
    """Per block ``i`` a future of ``perm[bounds[i]:bounds[i + 1]]`` on the worker of ``blocks[i]``."""
    return [scatter_to(client, perm[a:b], worker_of(client, f)) for a, b, f in zip(bounds[:-1], bounds[1:], blocks)]


def _check_block_rows(sizes: list[int], n: int) -> None:
    """The row blocks' sizes: at most ``n // MIN_SHARD_ROWS`` blocks, each of at least MIN_SHARD_ROWS rows."""
    check_n_blocks(len(sizes), n)
    if min(sizes) < MIN_SHARD_ROWS:
        raise ParameterError(f"every row block must have at least {MIN_SHARD_ROWS} rows; got sizes {list(sizes)}")


def check_n_blocks(n_blocks, n: int) -> int:
    """``n_blocks`` in [1, n // MIN_SHARD_ROWS] (every shard holds at least MIN_SHARD_ROWS rows)."""
    return check_int("n_blocks", n_blocks, low=1, high=max(1, n // MIN_SHARD_ROWS))


def _check_perm(perm, n: int) -> np.ndarray:
    """``perm`` as int64 (n,), refused unless it is a permutation of ``0 .. n - 1``."""
    p = np.asarray(perm)
    if p.shape != (n,) or not np.issubdtype(p.dtype, np.integer):
        raise InputDataError(f"perm must be an integer array of shape ({n},); got {p.dtype} {p.shape}")
    p = p.astype(np.int64)
    if not np.array_equal(np.sort(p), np.arange(n)):
        raise InputDataError(f"perm must be a permutation of 0 .. {n - 1} (every row once)")
    return p


def _check_coordinates(coordinates, n: int) -> np.ndarray:
    if coordinates is None:
        raise ParameterError("partition='coordinates' needs coordinates (n, d): the data or an initial embedding")
    Y = np.asarray(coordinates, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[0] != n or not np.all(np.isfinite(Y)):
        raise InputDataError(f"coordinates must be a finite ({n}, d) array; got shape {Y.shape}")
    return Y
