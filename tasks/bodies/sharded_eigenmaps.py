"""The sharded fit of Laplacian eigenmaps (``embed(..., sharded=True)``): no process holds X, the kNN
graph, the Laplacian or one index of all fit rows; every heavy object is split by rows over the Dask workers.

The shards are the ``P`` parts of a locality partition of the fit rows (:data:`PARTITION`,
:func:`spectral.neighbours.partition.bisection_partition_blocks`: recursive bisection along principal directions,
computed from the store's row chunks on the workers, where the labels stay; the flow process receives moments,
histograms and counts, never a row of X nor one number per row; each part's rows are assembled on the workers,
:func:`spectral.neighbours.sharded_assembly.assemble_parts`), the same parts for the kNN build and for the Laplacian, so
that most edges lie inside a shard and the per-shard preconditioner is strong. The partition draws nothing from
``random_state``.
The fit rows are those of the single-process stages (the hold-out draw of :func:`tasks.bodies.fit_rows.held_out_rows`
and exact copies left out; all rows with ``holdout=0`` and no copies), held as :class:`tasks.bodies.fit_rows.FitRows`;
the partition numbers them by their position in the fit set.

Two stages (:func:`tasks.fitting.fit_stages`), with the random sequence of the single-process stages (the kNN
build draws one seed from ``random_state`` first, the eigensolver uses what follows):

- ``knn``: :func:`spectral.neighbours.sharded.build_shard_indexes` (``partition="bisection"``) on the fit rows of the
  store's X as a Dask array (:func:`fit_X`; row chunks read on the workers): one pynndescent index per part,
  then :func:`~spectral.neighbours.sharded.shard_graph_futures`: shard-pair queries, multi-way merge. The held-out
  rows, read per row chunk by the workers, are searched in their home shard's index and in those of the shards
  their cut bounds do not rule out, and the answers merged
  (:func:`spectral.neighbours.sharded_query.query_shard_indexes`) into their
  :func:`~spectral.embedding.eigenmaps.candidate_count` nearest fit points, which the workers write to the candidate
  arrays (:data:`CANDIDATE_OUTPUTS`). Every row chunk of ``graph/knn`` is then written by a worker, in the
  original row order, from the pieces of the shard blocks that hold its fit rows and the ``k`` first
  candidates of its held-out rows (their nearest fit points, as in the single-process stage)
  (:func:`write_knn_chunk`; each shard block is split by chunk on its own worker first). ``graph/knn``
  records the partition (:func:`partition_record`: sizes and a digest made on the workers);
  ``outputs/<run>/in_fit`` marks the fit rows. :func:`sharded_knn` runs in the flow process and holds futures,
  the partition's sizes and cuts, and the fit rows.
- ``eigensolve`` (weights included): :func:`solve_sharded_eigenmaps` drives the distributed solver from the flow
  process: it recomputes the partition of the fit rows of ``outputs/<run>/in_fit`` (deterministic; refused
  if its digest differs from the kNN stage's), each part's kNN rows are read from the store by a task on a
  worker (neighbours renumbered as fit positions), the weights, their symmetrization and the normalized
  Laplacian are built per shard on the workers
  (:meth:`spectral.eigen.sharded.DistributedLaplacian.from_knn_blocks` with the parts' rows), and LOBPCG with
  the per-shard two-level AMG preconditioner finds the eigenvectors
  (:func:`spectral.eigen.sharded_solve.laplacian_eigenmaps_distributed`), returned in the fit rows' order.
  LOBPCG's (n_fit, k + 1) blocks stay on the workers as row parts of the shards
  (:mod:`spectral.eigen._sharded_lobpcg`), and so does the embedding (``gather=False``): the workers write the
  model's row chunks (:func:`write_model_from_shards`). The degrees and weight scales are exchanged between the
  workers and the neighbour lists renumbered there (:mod:`spectral.placement`). The driver holds the
  rows left out of the fit (:class:`tasks.bodies.fit_rows.FitRows`: none without a hold-out or copies; the model's fit
  rows are written by the workers, chunk by chunk), not the partition's labels, the degrees, the graph or the
  embedding. It is not a worker task: a driver on a worker whose memory crossed Dask's pause threshold (80 % of
  its limit) waits forever for the tasks pinned to its own shard. It writes the same model as the single-process stages
  (:class:`spectral.embedding.out_of_sample.LaplacianEigenmapsModel`),
  in row chunks (:func:`storage.models.create_model` ... :func:`~storage.models.finish_model`).

``embed-points`` (:mod:`tasks.bodies.point_writeback`) gives the fit rows their fitted values and maps the held-out
rows from
their stored candidates (:meth:`spectral.embedding.out_of_sample.LaplacianEigenmapsModel.transform_candidates`, the
Nystrom map that ``transform`` applies to an index's candidates), so no index of all fit rows is built.

Why a locality partition (``benchmarks/results/sharded_flow.md``, 1e6 x 32 lifted Swiss roll, 4 workers x 1.5
GB): 99.5 % of the kNN edges lie inside a shard and the eigensolve converges in 18 LOBPCG iterations, 0.17
degree from the single-process embedding; with contiguous row ranges as shards 25 % of the edges were inside a
shard and the eigensolve stopped at its 300-iteration cap. Held-out points at 1e6 (10 %): 1.05 shards searched
per point, the embeddings 0.52 degree from the single-process flow's.

Scope (refused or stated, not silently changed): Laplacian eigenmaps with ``affinity="knn"`` and
``normalization="symmetric"`` only (:func:`tasks.sharded_choice.check_sharded` refuses the rest); any ``holdout`` in
[0, 1). Each held-out point is searched in its home shard and in the shards whose cut bound is within its ``k``-th
home distance (:mod:`spectral.neighbours.sharded_query`); no reverse pairs complete those searches; the candidate
arrays take n x kc x 12 bytes of the store before compression (their fit rows hold fill values). Exact duplicate
rows are collapsed as in the single-process stages (found on the workers,
:mod:`spectral.neighbours.sharded_duplicates`; a copy is searched like a held-out row and gets its original's value
through the distance-0 rule); the graph must be connected (several components are refused, naming the remedy);
``knn_method`` is not used (NN-descent per shard). ``extend`` of a sharded model searches the new points in
per-shard indexes on the workers (:mod:`tasks.bodies.sharded_extend`); with ``sharded=False`` it rebuilds one index
of the
fit rows instead.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_random_state, seed_int
from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.placement import item, shared_value
from eigenflow.storage import layout
from eigenflow.storage.arrays import chunk_rows, read_X, row_chunks, x_shape
from eigenflow.storage.checksums import check_intact, completed_row_chunks, record_checksums, record_chunk
from eigenflow.storage.embedding_io import create_output, has_output, read_output, write_output_block
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.graph_io import create_knn, read_knn_attrs, read_knn_rows, write_knn_block
from eigenflow.storage.models import create_model, finish_model, write_model_rows
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies.fit_rows import FIT_ROWS, IN_FIT, FitRows, fit_X, held_out_rows, read_fit_rows, write_in_fit
from eigenflow.tasks.bodies.laplacian_eigenmaps import KNN_ARRAYS, METHOD, MODEL_STATE


#: The row partition of the sharded path (:data:`spectral.neighbours.sharded.SHARD_PARTITIONS`): the kNN shards and the
#: Laplacian shards are its parts.
PARTITION = "bisection"


def partition_record(digest: str, bounds: np.ndarray) -> dict[str, Any]:
    """What ``graph/knn`` records of the row partition (its attribute ``partition``): method, part sizes and the
    digest of the parts' rows (:func:`spectral.neighbours.sharded_assembly.parts_digest`, made on the workers; the
    eigensolve stage recomputes the partition and refuses one that differs)."""
    return {"method": PARTITION, "sizes": [int(s) for s in np.diff(bounds)], "parts_digest": digest}


def sharded_knn(store: Store, run: str, client: Any, *, n_neighbors: int, metric: str, n_shards: int | None,
                holdout: float, random_state: int | None) -> dict[str, Any]:
    """The ``knn`` stage: the sharded kNN graph of every row of X, written chunk by chunk by the workers.

    The shard indexes cover the fit rows (:func:`tasks.bodies.fit_rows.fit_rows_for`, exact copies of an earlier fit row
    left out as in the single-process stage: found on the workers by :func:`spectral.neighbours.sharded_duplicates.
    repeated_positions`, and mapped like held-out rows); the shards are the parts of
    their row partition (:data:`PARTITION`). Held-out rows are searched in the shard indexes, pruned by the cuts
    (:func:`spectral.neighbours.sharded_query.query_shard_indexes`): their ``graph/knn`` rows get their ``k`` nearest
    fit points, and their :func:`~spectral.embedding.eigenmaps.candidate_count` nearest go to the candidate arrays
    (:data:`CANDIDATE_OUTPUTS`) for the out-of-sample map. The graph is written in the original row order.
    Runs in the flow process and holds futures, the partition's (P,) sizes and cuts, and the rows left out of the
    fit (:class:`tasks.bodies.fit_rows.FitRows`: the hold-out draw and the copies, no (n_fit,) array; ``outputs/<run>/
    in_fit`` is written by a worker); the partition's labels and the shards' row lists stay on the workers.
    Returns the number of shards, sizes, the partition record and the fraction of the directed kNN edges of
    the fit rows inside a shard.
    """
    from eigenflow.spectral.neighbours.sharded_assembly import parts_digest
    from eigenflow.spectral.neighbours.sharded_duplicates import repeated_positions
    from eigenflow.spectral.neighbours.sharded import build_shard_indexes, shard_graph_futures

    n, _ = x_shape(store)
    # the draw makes an (n,) mask: on a worker (only the held-out rows come back)
    fit = FitRows(n, client.submit(held_out_rows, n, holdout, random_state, pure=False).result())
    copies = repeated_positions(fit_X(store, fit), client)  # collapsed as the single-process stage does
    fit = fit.without(copies)
    held = fit.left_out  # the hold-out draw and the copies: searched in the shard indexes
    t0 = time.perf_counter()
    sharded = build_shard_indexes(fit_X(store, fit), n_neighbors, n_shards=n_shards, metric=metric,
                                  random_state=check_random_state(random_state), partition=PARTITION,
                                  queried=held.size > 0, client=client)
    blocks = shard_graph_futures(sharded)  # per shard, neighbours as fit positions
    bounds = sharded.partition.bounds
    record = partition_record(parts_digest(client, sharded.rows, bounds), bounds)
    index_params = {"method": "nndescent", "metric": metric, "n_neighbors": n_neighbors,
                    "seed": seed_int(check_random_state(random_state))}
    create_knn(store, n_neighbors, {"run": run, "metric": metric, "n_fit": fit.size, "sharded": True,
                                        "n_shards": len(blocks), "partition": record,
                                        "index_params": index_params}, overwrite=True)
    to_rows = shared_value(client, fit) if held.size else None  # fit position -> row
    chunks = row_chunks(store)
    chunk_bounds = np.array([start for start, _ in chunks] + [n], dtype=np.int64)
    # per shard: its rows of every row chunk, split on the shard's worker (only those move)
    splits = [client.submit(_split_rows, block, rows, chunk_bounds, to_rows, pure=False)
              for block, rows in zip(blocks, sharded.rows)]
    present = np.array(client.gather([client.submit(_piece_sizes, s, pure=False) for s in splits])) > 0  # (P, J)
    held_parts, writes, kc, searches = _query_held_out(store, run, client, sharded, fit, chunks, to_rows)
    for j, (start, stop) in enumerate(chunks):
        parts = list(held_parts.get(j, []))
        parts += [client.submit(item, splits[p], j, pure=False) for p in np.flatnonzero(present[:, j])]
        writes.append(client.submit(write_knn_chunk, store, start, stop - start, parts, pure=False))
    inside = client.gather([client.submit(_inside_counts, block, rows, pure=False)
                            for block, rows in zip(blocks, sharded.rows)])
    client.gather(writes)
    n_searches = sum(client.gather(searches))
    build_seconds = time.perf_counter() - t0
    del blocks, splits, writes, held_parts, sharded, searches
    client.submit(record_checksums, store, KNN_ARRAYS, pure=False).result()
    client.submit(write_in_fit, store, run, fit, pure=False).result()
    return {"k": n_neighbors, "method": "sharded", "n_shards": int(bounds.size - 1), "n_fit": fit.size,
            "n_heldout": int(held.size), "n_candidates": kc, "n_duplicates": int(copies.size),
            "build_seconds": build_seconds,
            "heldout_shards_searched": n_searches / held.size if held.size else 0.0,  # per held-out row, of P
            "partition": record["method"], "shard_sizes": record["sizes"],
            "knn_inside_fraction": sum(i for i, _ in inside) / max(sum(t for _, t in inside), 1)}


def _query_held_out(store: Store, run: str, client: Any, sharded: Any, fit: FitRows, chunks: list,
                    to_rows: Any) -> tuple[dict[int, list], list, int, list]:
    """Search the rows left out of the fit ``fit.left_out`` (held out, copies) in the shard indexes (pruned by the
    cuts), one query block per row chunk of X (read on a worker), and write their candidates
    (:func:`write_candidates_chunk`, by the workers). Returns, per row chunk ``j`` with held-out rows, the
    ``graph/knn`` part of those rows (as :func:`write_knn_chunk` takes it: their ``k`` nearest fit points), the
    futures of the candidate writes, the number of candidates ``kc`` (0
    without held-out rows) and futures of the number of (row, shard) searches per block."""
    from eigenflow.spectral.embedding.out_of_sample import candidate_count
    from eigenflow.spectral.neighbours.sharded_query import query_shard_indexes

    held = fit.left_out
    if not held.size:
        return {}, [], 0, []
    kc = candidate_count(fit.size, sharded.n_neighbors)
    create_candidates(store, run, kc)
    local = {}
    for j, (start, stop) in enumerate(chunks):
        lo, hi = np.searchsorted(held, [start, stop])
        if hi > lo:
            local[j] = held[lo:hi] - start
    queries = [client.submit(read_X_rows, store, chunks[j][0], positions, pure=False)
               for j, positions in local.items()]
    found, searches = query_shard_indexes(sharded, queries, kc, with_search_counts=True)
    answers = dict(zip(local, found))
    writes = [client.submit(write_candidates_chunk, store, run, chunks[j][0], chunks[j][1] - chunks[j][0],
                            answers[j], local[j], pure=False) for j in local]
    parts = {j: [client.submit(_nearest_rows, answers[j], to_rows, sharded.n_neighbors, local[j], pure=False)]
             for j in local}
    return parts, writes, kc, searches


def read_X_rows(store: Store, start: int, positions: np.ndarray) -> np.ndarray:
    """Task: the rows ``start + positions`` of X (positions (m,) ascending inside one row chunk), ``(m, d)``."""
    return read_X(store, start + int(positions[0]), start + int(positions[-1]) + 1)[positions - positions[0]]


def _nearest_rows(answer: tuple[np.ndarray, np.ndarray], to_rows: FitRows, k: int,
                  positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Task: the ``k`` first candidates of held-out rows (fit positions, (m, kc)) as rows of X, ``(m, k)``, with
    the rows' ``positions`` in their chunk (as :func:`write_knn_chunk` takes them)."""
    return to_rows.rows_at(answer[0][:, :k]), np.ascontiguousarray(answer[1][:, :k]), positions


def write_knn_chunk(store: Store, start: int, size: int,
                    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> int:
    """Write the kNN rows of the row chunk ``start:start + size`` from ``parts``: ``(indices, distances) (m, k)
    of one shard's rows in the chunk, or of its held-out rows, and their positions (m,) in the chunk``. The parts
    must cover every row of the chunk once. Runs on a worker; returns the rows written."""
    k = parts[0][0].shape[1]
    indices = np.empty((size, k), dtype=np.int64)
    distances = np.empty((size, k), dtype=np.float32)
    for idx, dist, positions in parts:
        indices[positions] = idx
        distances[positions] = dist
    _check_cover(size, [positions for _, _, positions in parts], f"the kNN chunk at {start}",
                 "the shards and the held-out rows")
    write_knn_block(store, start, indices, distances)
    return size


def _check_cover(size: int, positions: list[np.ndarray], chunk: str, sources: str) -> None:
    """Refuse pieces whose ``positions`` do not cover every row ``0..size-1`` of ``chunk`` exactly once."""
    covered = np.zeros(size, dtype=np.int64)
    for at in positions:
        np.add.at(covered, at, 1)
    if not np.all(covered == 1):
        raise RuntimeError(f"{sources} must cover every row of {chunk} once; got cover counts in "
                           f"[{covered.min()}, {covered.max()}]")


# ---- the held-out rows' candidates (outputs/<run>/<name>, row chunks aligned with X) -------------------------
#: ``outputs/<run>/<name>`` (n, kc) of a sharded run with held-out rows: the ``kc``
#: (:func:`spectral.embedding.eigenmaps.candidate_count`) nearest fit points of each held-out row as positions in the
#: fit set (int64, sorted by distance; -1 on fit rows) and their distances (float32; 0 on fit rows). The
#: ``embed-points`` stage maps held-out rows from them (:meth:`LaplacianEigenmapsModel.transform_candidates`).
CANDIDATE_INDICES = "heldout_candidates"
CANDIDATE_DISTANCES = "heldout_candidate_distances"
CANDIDATE_OUTPUTS = (CANDIDATE_INDICES, CANDIDATE_DISTANCES)


def create_candidates(store: Store, run: str, n_candidates: int) -> None:
    """Create the empty candidate arrays of ``run`` ((n, n_candidates); replacing those of an earlier attempt)."""
    create_output(store, run, CANDIDATE_INDICES, n_candidates, dtype="int64", fill_value=-1, overwrite=True)
    create_output(store, run, CANDIDATE_DISTANCES, n_candidates, dtype="float32", fill_value=0.0,
                  overwrite=True)


def write_candidates_chunk(store: Store, run: str, start: int, size: int, answer: tuple[np.ndarray, np.ndarray],
                           positions: np.ndarray) -> int:
    """Task: write the candidate arrays' row chunk ``start:start + size``, its held-out rows ``positions`` (m,)
    taking ``answer`` ``(indices (m, kc) fit positions, distances (m, kc))``, and record its checksums."""
    for name, values, fill in ((CANDIDATE_INDICES, answer[0], -1), (CANDIDATE_DISTANCES, answer[1], 0)):
        block = np.full((size, values.shape[1]), fill, dtype=values.dtype)
        block[positions] = values
        write_output_block(store, run, name, start, block)
        record_chunk(store, layout.output_path(run, name), start)
    return int(positions.size)


def has_candidates(store: Store, run: str) -> bool:
    """Whether ``run`` stored candidates for its held-out rows (a sharded run with a hold-out)."""
    return has_output(store, run, CANDIDATE_INDICES)


def read_candidates(store: Store, run: str, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the candidate arrays of ``store``: ``(indices int64 (m, kc), distances float32
    (m, kc))``."""
    return (read_output(store, run, CANDIDATE_INDICES, start, stop),
            read_output(store, run, CANDIDATE_DISTANCES, start, stop))


def candidates_intact(store: Store, run: str) -> bool:
    """Whether the candidate arrays of ``run`` are there and match their chunk checksums when the run has held-out
    rows (``outputs/<run>/in_fit``), or it has none."""
    try:
        if read_output(store, run, IN_FIT).all():
            return True
        check_intact(store, tuple(layout.output_path(run, name) for name in CANDIDATE_OUTPUTS))
    except StoreFormatError:
        return False
    return has_candidates(store, run)


def candidates_complete(out_store: Store, out_run: str) -> bool:
    """Whether every row chunk of the candidate arrays of ``out_run`` was written and matches its checksum (an
    ``extend`` run, :mod:`tasks.bodies.sharded_extend`, where every row has candidates; :func:`candidates_intact` is the
    embed run's check, where only held-out rows have them)."""
    if not has_output(out_store, out_run, CANDIDATE_OUTPUTS[0]):
        return False
    starts = [start for start, _ in row_chunks(out_store)]
    paths = [layout.output_path(out_run, name) for name in CANDIDATE_OUTPUTS]
    return set(completed_row_chunks(out_store, paths, starts)) == set(starts)


def _split_rows(block: tuple[np.ndarray, np.ndarray], rows: np.ndarray, chunk_bounds: np.ndarray,
                to_rows: FitRows | None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Task: a shard's kNN block ``(indices, distances)`` (n_p, k) of its fit positions ``rows`` (ascending) cut by
    the row chunks of X (``chunk_bounds`` (J + 1,)): per chunk ``(indices, distances, positions in the chunk)``,
    the neighbours (fit positions) as rows of X (``to_rows.rows_at``; None: every row is a fit point)."""
    original = rows if to_rows is None else to_rows.rows_at(rows)
    indices = block[0] if to_rows is None else to_rows.rows_at(block[0])
    cuts = np.searchsorted(original, chunk_bounds)
    return [(indices[a:b], block[1][a:b], original[a:b] - chunk_bounds[j])
            for j, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]


def _piece_sizes(pieces: list) -> list[int]:
    """Task: the rows of each piece of a split (the last item of each is its positions)."""
    return [int(p[-1].size) for p in pieces]


def _rows_of(positions: np.ndarray, fit: FitRows) -> np.ndarray:
    """Task: fit positions as rows of X."""
    return fit.rows_at(positions)


def _inside_counts(block: tuple[np.ndarray, np.ndarray], rows: np.ndarray) -> tuple[int, int]:
    """Task: ``(inside, total)`` neighbours of a shard's kNN block that lie in the shard (rows ``rows``)."""
    from eigenflow.spectral.neighbours.partition import inside_counts

    return inside_counts(block[0], rows)


def read_knn_shard(store: Store, rows: np.ndarray, fit: FitRows | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The kNN lists of the rows ``rows`` (ascending) of ``graph/knn`` (indices int64, distances float64), read on
    a worker; with ``fit`` the neighbours, all fit rows, as fit positions."""
    indices, distances = read_knn_rows(store, rows)
    if fit is not None:  # no (n,) position table on a worker holding one shard
        indices = fit.positions_of(indices, source=f"graph/knn of {store}")
    return indices, distances.astype(np.float64)


def write_model_from_shards(store: Store, run: str, client: Any, op: Any, embedding: list, columns: list,
                            values: np.ndarray, fit: FitRows, state_attrs: dict) -> None:
    """Write ``models/<run>`` (the :class:`~spectral.embedding.out_of_sample.LaplacianEigenmapsModel` of the
    single-process stages) from the workers: each shard's rows of its row arrays (embedding ``embedding[p]`` (n_p, k),
    degrees, scales and radii ``columns[p]`` (n_p, 2) from :func:`_model_columns`) are made on the shard's worker and
    cut by the model's row chunks (fit positions, ``chunk_rows`` of X); one task per chunk puts the pieces together
    and writes it (:func:`write_model_chunk`, which also writes the chunk's fit rows from ``fit``). The driver
    writes the (1, k) eigenvalues and the attributes, with the completion flag last
    (:func:`storage.models.finish_model`)."""
    n_fit, k = fit.size, int(values.size)
    size = chunk_rows(store)
    create_model(store, run, {"embedding": ((n_fit, k), "float64"), "component_labels": ((n_fit,), "int64"),
                                  FIT_ROWS: ((n_fit,), "int64"),
                                  **{name: ((n_fit,), "float64") for name in ("degrees", "scales", "radii")}},
                 chunk_rows=size)
    chunk_bounds = np.append(np.arange(0, n_fit, size, dtype=np.int64), n_fit)
    splits = [client.submit(_model_rows_split, z, shard, cols, rows, chunk_bounds, workers=[worker], pure=False)
              for z, shard, cols, rows, worker in zip(embedding, op.shards, columns, op.original_rows(), op.workers)]
    present = np.array(client.gather([client.submit(_piece_sizes, s, pure=False) for s in splits])) > 0  # (P, J)
    writes, fit_future = [], shared_value(client, fit)
    for j, (start, stop) in enumerate(zip(chunk_bounds[:-1], chunk_bounds[1:])):
        parts = [client.submit(item, splits[p], j, workers=[op.workers[p]], pure=False)
                 for p in np.flatnonzero(present[:, j])]
        writes.append(client.submit(write_model_chunk, store, run, int(start), int(stop - start), k, parts,
                                    fit_future, pure=False))
    client.gather(writes)
    finish_model(store, run, {"component_eigenvalues": values[None, :]},
                 {"method": METHOD, "state": MODEL_STATE, "state_attrs": state_attrs})


def _model_columns(distances: np.ndarray, params: dict) -> np.ndarray:
    """Task: ``(n_p, 2)`` the model's weight scale and radius (k-th neighbour distance) of each row of a shard,
    from its kNN distances ``(n_p, k)`` and the resolved weight parameters (``WeightParams`` attributes)."""
    from eigenflow.spectral.graph.weights import WeightParams, scales_of

    return np.column_stack([scales_of(distances, WeightParams.from_attrs(params)), distances[:, -1]])


def _model_rows_split(Z: np.ndarray, shard: Any, columns: np.ndarray, rows: np.ndarray,
                      chunk_bounds: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Task: the shard's model rows ``(n_p, k + 3)``: embedding, degree, weight scale and radius (``columns``
    (n_p, 2), :func:`_model_columns`), cut by the model's row chunks (``chunk_bounds`` (J + 1,), fit positions): per
    chunk ``(rows (m, k + 3), their positions in the chunk (m,))``, the shard's fit positions being ``rows``
    (ascending)."""
    M = np.column_stack([Z, shard.degrees, columns])
    cuts = np.searchsorted(rows, chunk_bounds)
    return [(M[a:b], rows[a:b] - chunk_bounds[j]) for j, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]


def write_model_chunk(store: Store, run: str, start: int, size: int, k: int,
                      parts: list[tuple[np.ndarray, np.ndarray]], fit: FitRows) -> int:
    """Task: the model's row chunk ``start:start + size`` (fit positions) from ``parts`` ``(rows (m, k + 3) of
    :func:`_model_rows_split`, their positions in the chunk (m,))``, which must cover the chunk once, and its fit
    rows (rows of X at those fit positions)."""
    M = np.empty((size, k + 3))
    for rows, at in parts:
        M[at] = rows
    _check_cover(size, [at for _, at in parts], f"the model chunk at {start}", "the shards")
    write_model_rows(store, run, start, {"embedding": M[:, :k], "component_labels": np.zeros(size, np.int64),
                                             "degrees": M[:, k], "scales": M[:, k + 1], "radii": M[:, k + 2],
                                             FIT_ROWS: fit.rows_at(np.arange(start, start + size))})
    return size


def solve_sharded_eigenmaps(store: Store, run: str, client: Any, *, n_components: int, weighting: str,
                            symmetrize: str, n_shards: int, tol: float | None,
                            random_state: int | None) -> dict[str, Any]:
    """The ``eigensolve`` stage of the sharded path (weights included), driven from the calling process with
    ``client`` (see the module docstring). Writes ``models/<run>``."""
    from eigenflow.spectral.eigen.sharded import DistributedLaplacian
    from eigenflow.spectral.eigen.sharded_solve import laplacian_eigenmaps_distributed
    from eigenflow.spectral.embedding.out_of_sample import LaplacianEigenmapsModel
    from eigenflow.spectral.graph.weights import WeightParams
    from eigenflow.spectral.neighbours.sharded_assembly import assemble_parts, parts_digest

    from eigenflow.spectral.neighbours.partition import bisection_partition_blocks

    knn_attrs = read_knn_attrs(store)
    if knn_attrs.get("run") != run:
        raise StoreFormatError(f"graph/knn of {store} belongs to run {knn_attrs.get('run')!r}, not {run!r}; "
                               "run the flow again with a new run name")
    fit = client.submit(read_fit_rows, store, run, pure=False).result()  # the kNN stage's (O(left out))
    built_with = knn_attrs.get("partition")
    if not built_with or built_with.get("method") != PARTITION:
        raise InputDataError(f"graph/knn records no {PARTITION!r} row partition (partition={built_with!r}): it was "
                             "built by an older sharded stage; rerun the knn stage (overwrite=True)")
    rng = check_random_state(random_state)
    seed_int(rng)  # the draw the kNN stage made (LaplacianEigenmaps.fit order)
    t0 = time.perf_counter()
    parts = bisection_partition_blocks(fit_X(store, fit), n_shards, client)  # no random draws
    positions, _ = assemble_parts(client, parts)  # per shard its fit positions, on the workers
    partition_seconds = time.perf_counter() - t0
    recomputed = partition_record(parts_digest(client, positions, parts.bounds), parts.bounds)
    if recomputed != built_with:
        raise InputDataError(f"the row partition recomputed from X ({recomputed}) differs from the one graph/knn was "
                             f"built with ({built_with}); rerun the knn stage")
    to_rows = None if fit.complete else shared_value(client, fit)
    rows = positions if fit.complete else [client.submit(_rows_of, p, to_rows, pure=False) for p in positions]
    blocks = [client.submit(read_knn_shard, store, r, to_rows, pure=False) for r in rows]
    indices = [client.submit(item, b, 0, pure=False) for b in blocks]
    distances = [client.submit(item, b, 1, pure=False) for b in blocks]
    del blocks
    op = DistributedLaplacian.from_knn_blocks(indices, distances, weighting=weighting, symmetrize=symmetrize,
                                              normalization="symmetric", perm=positions, client=client)
    params = op.stats["weight_params"]
    columns = [client.submit(_model_columns, d, params, pure=False) for d in distances]
    del indices, distances  # the kNN lists are freed once the columns are taken, not held through the solve
    embedding, values, res = laplacian_eigenmaps_distributed(op, n_components, tol=tol, random_state=rng,
                                                             gather=False)
    solve_seconds = time.perf_counter() - t0
    write_model_from_shards(store, run, client, op, embedding, columns, values, fit,
                            LaplacianEigenmapsModel.state_attrs("symmetric",
                                                                WeightParams.from_attrs(op.stats["weight_params"]),
                                                                knn_attrs["index_params"]))
    stats = dict(op.stats)
    traffic = res.info["traffic"]
    return {"eigen_solver": "distributed-lobpcg", "eigenvalues": [float(v) for v in values],
            "converged": bool(res.converged), "n_iter": int(res.n_iter),
            "n_components_graph": 1, "n_shards": int(n_shards), "solve_seconds": solve_seconds,
            "partition": PARTITION, "partition_seconds": partition_seconds,
            "inside_fraction": float(stats["inside_fraction"]),
            "bytes_per_iteration": float(traffic["bytes_per_iteration"]),
            "max_iter": int(res.info["max_iter"])}
