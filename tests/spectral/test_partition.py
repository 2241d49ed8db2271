"""The locality row partition (spectral.neighbours.partition) and the sharded kNN graph on its parts (spectral.neighbours.sharded).

Oracles: the partition's contract (every row in exactly one part, part sizes floor(n / P) or ceil(n / P),
the same parts from one block, several blocks or a dask array on workers, the same parts on every call), the
exact kNN graph (fraction of its edges inside a part; the sharded graph on bisection shards equals it), and
the error messages of bad parameters.
"""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.neighbours.merge import ShardAnswer, add_candidates, reverse_candidates
from eigenflow.spectral.neighbours.sharded import sharded_knn_graph
from eigenflow.spectral.neighbours.partition import (SLICE_ROWS, bisection_blocks, bisection_partition, bisection_partition_array,
                                bisection_partition_dask, block_moments, inside_counts)

from tests.helpers import local_cluster


@pytest.fixture(scope="module")
def roll():
    """A 3000-point lifted Swiss roll (32-D) and its exact kNN graph (k = 10)."""
    X = make_swiss_roll_lifted(3000, n_features=32, random_state=0)[0]
    return X, knn_graph(X, 10, method="exact")[0]


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    with local_cluster(2) as address, Client(address) as c:
        yield c


def test_block_moments_read_in_row_slices_equal_the_direct_moments():
    """A float32 block longer than :data:`SLICE_ROWS` (read in slices): counts, means and centred scatter of
    each part equal numpy's on the whole part in float64; a part absent from the block stays zero; a NaN in a
    later slice is named by its global row."""
    rng = np.random.default_rng(3)
    m = 2 * SLICE_ROWS + 17
    block = (rng.normal(size=(m, 6)) * 100 + 1e4).astype(np.float32)  # far from 0: centring must be exact
    labels = rng.choice([0, 2, 3], size=m)
    counts, means, scatter = block_moments(block, labels, 4, start=100)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=4))
    assert not means[1].any() and not scatter[1].any()
    for c in (0, 2, 3):
        Y = block[labels == c].astype(np.float64)
        np.testing.assert_allclose(means[c], Y.mean(axis=0), rtol=1e-12)
        Z = Y - Y.mean(axis=0)
        np.testing.assert_allclose(scatter[c], Z.T @ Z, rtol=1e-9, atol=1e-6 * np.abs(Z.T @ Z).max())
    block[SLICE_ROWS + 5, 2] = np.nan
    with pytest.raises(InputDataError, match=f"row {100 + SLICE_ROWS + 5} holds NaN"):
        block_moments(block, labels, 4, start=100)


def _in_memory_blocks(X: np.ndarray, cuts: np.ndarray):
    """``(keep, map_blocks, brought)`` for :func:`bisection_blocks` over the row blocks ``X[cuts[j]:cuts[j + 1]]``
    in memory; ``brought`` collects ``(task name, largest result size)`` of every ``map_blocks`` call."""
    brought = []

    def keep(fn, args):
        return [fn(X[a:b], *arg) for a, b, arg in zip(cuts[:-1], cuts[1:], args)]

    def map_blocks(fn, args):
        out = keep(fn, args)
        brought.append((fn.__name__, max(_size(r) for r in out)))
        return out

    return keep, map_blocks, brought


def _labels(perm, bounds):
    labels = np.empty(perm.size, dtype=np.int64)
    labels[perm] = np.repeat(np.arange(bounds.size - 1), np.diff(bounds))
    return labels


@pytest.mark.parametrize("n, n_parts", [(1, 1), (2, 2), (7, 3), (1000, 1), (1001, 2), (1003, 3), (999, 5), (1000, 8),
                                        (1000, 13)])
def test_every_row_in_one_part_of_near_equal_size(n, n_parts):
    Y = np.random.default_rng(n).normal(size=(n, 4))
    parts = bisection_partition_array(Y, n_parts)
    perm, bounds = parts.perm, parts.bounds
    assert len(parts.splits) == n_parts - 1
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))  # a permutation: every row exactly once
    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == n and sizes.size == n_parts
    assert np.all((sizes == n // n_parts) | (sizes == -(-n // n_parts))), sizes
    for a, b in zip(bounds[:-1], bounds[1:]):
        assert np.all(np.diff(perm[a:b]) > 0)  # ascending inside each part


def test_parts_keep_the_neighbours_together(roll):
    X, idx = roll
    measured = {}
    for P in (2, 4, 8):
        parts = bisection_partition_array(X, P)
        perm, bounds = parts.perm, parts.bounds
        labels = _labels(perm, bounds)
        measured[P] = float(np.mean(labels[idx] == labels[:, None]))
        inside = [inside_counts(idx[perm[a:b]], perm[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        assert sum(i for i, _ in inside) / sum(t for _, t in inside) == pytest.approx(measured[P])
    # measured 0.981 / 0.950 / 0.913; contiguous row ranges of this (shuffled) data keep about 1 / P (0.248 at P = 4)
    assert measured[2] > 0.97 and measured[4] > 0.93 and measured[8] > 0.89, measured
    contiguous = np.arange(X.shape[0]) * 4 // X.shape[0]
    assert np.mean(contiguous[idx] == contiguous[:, None]) < 0.3


def test_deterministic_and_independent_of_the_blocks(roll):
    X = roll[0]
    parts = bisection_partition_array(X, 5)
    perm, bounds = parts.perm, parts.bounds
    again = bisection_partition_array(X.copy(), 5)
    np.testing.assert_array_equal(perm, again.perm)
    np.testing.assert_array_equal(bounds, again.bounds)
    cuts = np.array([0, 700, 1400, 1401, 2500, 3000])
    keep, map_blocks, brought = _in_memory_blocks(X, cuts)  # brought: what comes back to the driver, never O(n)

    blocked = bisection_blocks(map_blocks, keep, cuts, 5)
    np.testing.assert_array_equal(blocked.to_row_partition().perm, perm)
    np.testing.assert_array_equal(perm, _reference_bisection(X, 5))
    np.testing.assert_array_equal(blocked.bounds, bounds)
    assert blocked.counts.shape == (5, 5) and blocked.counts.sum() == X.shape[0]
    assert [(c.lo, c.mid, c.hi) for c in blocked.splits] == [(c.lo, c.mid, c.hi) for c in parts.splits]
    np.testing.assert_allclose([(c.left_max, c.right_min) for c in blocked.splits],
                               [(c.left_max, c.right_min) for c in parts.splits], rtol=1e-12)  # summation order
    # moments are (c, d, d): 4 x 32 x 32 at the last level; histograms (c, 256); no block sends its rows
    assert max(size for _, size in brought) <= 4 * 32 * 32 + 4 * 32 + 4, brought
    assert "block_projections" not in {name for name, _ in brought}


def test_power_rounds_over_the_blocks_equal_the_scatter_matrices(monkeypatch):
    """Above SCATTER_MAX_FEATURES columns the power iterations run over the blocks (products (c, d) per block,
    no (c, d, d) scatter): the same parts as the direct reference and as the scatter path on the same blocks, the
    same directions to float32 rounding."""
    import eigenflow.spectral.neighbours.partition as partition

    X = make_swiss_roll_lifted(2000, n_features=2 * partition.SCATTER_MAX_FEATURES, random_state=4)[0]
    cuts = np.array([0, 500, 1300, 1301, 2000])
    keep, map_blocks, brought = _in_memory_blocks(X, cuts)

    rounds = bisection_blocks(map_blocks, keep, cuts, 6)
    assert "block_scatter_products" in {name for name, _ in brought} and "block_moments" not in {
        name for name, _ in brought}
    d = X.shape[1]
    # (c, d) products and sums, c <= 4 parts at a level, never (c, d, d)
    assert max(size for name, size in brought if name in ("block_sums", "block_scatter_products")) <= 4 * d + 4
    monkeypatch.setattr(partition, "SCATTER_MAX_FEATURES", d)
    scatter = bisection_blocks(map_blocks, keep, cuts, 6)
    np.testing.assert_array_equal(rounds.to_row_partition().perm, scatter.to_row_partition().perm)
    np.testing.assert_array_equal(rounds.to_row_partition().perm, _reference_bisection(X, 6))
    for a, b in zip(rounds.splits, scatter.splits):  # float32 X: the rounds' products are float32 (documented)
        np.testing.assert_allclose(a.direction, b.direction, atol=1e-5)
        np.testing.assert_allclose([a.left_max, a.right_min], [b.left_max, b.right_min], rtol=1e-5)


def _reference_bisection(X: np.ndarray, P: int) -> np.ndarray:
    """``perm`` of the bisection computed the direct way (all labels and projections in memory, each part's rows
    cut by a stable argsort of their projections): the oracle of the distributed selection."""
    from eigenflow.spectral.neighbours.partition import principal_direction, split_sizes

    X = np.asarray(X, dtype=np.float64)
    labels, targets = np.zeros(X.shape[0], dtype=np.int64), [P]
    while any(t > 1 for t in targets):
        new_labels, new_targets = np.empty_like(labels), []
        for i, t in enumerate(targets):
            rows = np.flatnonzero(labels == i)
            if t == 1:
                new_labels[rows] = len(new_targets)
                new_targets.append(1)
                continue
            Z = X[rows] - X[rows].mean(axis=0)
            direction = principal_direction(lambda v: Z.T @ (Z @ v), X.shape[1])
            left, cut = split_sizes(rows.size, t)
            order = np.argsort(Z @ direction, kind="stable")
            new_labels[rows[order[:cut]]] = len(new_targets)
            new_labels[rows[order[cut:]]] = len(new_targets) + 1
            new_targets += [left, t - left]
        labels, targets = new_labels, new_targets
    return np.argsort(labels, kind="stable")


def _size(result) -> int:
    """Numbers in a (nested) task result."""
    if isinstance(result, np.ndarray):
        return result.size
    if isinstance(result, dict):
        return len(result)
    if isinstance(result, (tuple, list)):
        return sum(_size(r) for r in result)
    return 1


@pytest.mark.parametrize("ties", ["all", "many"])
def test_ties_in_the_projections_go_to_the_smaller_row(ties):
    """Equal projections (duplicate rows): the cut follows the stable sort's order, by row, whether the tied
    rows are few enough to be brought back or decided from per-block counts."""
    rng = np.random.default_rng(3)
    X = np.repeat(rng.normal(size=(1, 3)), 9000, axis=0) if ties == "all" else \
        np.repeat(rng.normal(size=(30, 3)), 300, axis=0)[rng.permutation(9000)]
    cuts = np.array([0, 2000, 4500, 4501, 9000])

    def keep(fn, args):
        return [fn(X[a:b], *arg) for a, b, arg in zip(cuts[:-1], cuts[1:], args)]

    got = bisection_blocks(keep, keep, cuts, 5).to_row_partition()
    np.testing.assert_array_equal(got.perm, _reference_bisection(X, 5))
    sizes = np.diff(got.bounds)
    assert np.all((sizes == 1800)), sizes
    if ties == "all":  # every projection equal: the parts are row ranges
        np.testing.assert_array_equal(got.perm, np.arange(9000))


def test_dask_partition_on_workers_equals_the_in_memory_one(client, roll):
    import dask.array as da

    X = roll[0]
    got = bisection_partition_dask(da.from_array(X, chunks=(512, 16)), 4, client)
    expected = bisection_partition_array(X, 4)
    np.testing.assert_array_equal(got.perm, expected.perm)
    np.testing.assert_array_equal(got.bounds, expected.bounds)


def test_cut_gaps_bound_the_distances_and_prune_the_queries(roll):
    """Split.gap is a lower bound of the distance to every row of the other side; the shard-pair queries search
    only the rows that can have a neighbour across the cut (the graph stays exact, see the test below)."""
    from eigenflow.spectral.neighbours.index import KNNIndex
    from eigenflow.spectral.neighbours.sharded import _kth_distance, _own_graph, _query_plan, _search_taken, _take_planned

    X, idx = roll
    parts = bisection_partition_array(X, 4)
    rows = [parts.perm[a:b] for a, b in zip(parts.bounds[:-1], parts.bounds[1:])]
    for p, q in [(0, 1), (1, 0), (0, 3), (3, 2)]:
        cut, q_left = parts.separating(p, q)
        other = np.concatenate(rows[cut.mid:cut.hi] if q_left else rows[cut.lo:cut.mid])
        nearest = np.min(np.linalg.norm(X[rows[q]][:, None, :] - X[other][None, :, :], axis=2), axis=1)
        assert np.all(cut.gap(X[rows[q]], q_left) <= nearest + 1e-9)
    with pytest.raises(ParameterError, match=r"parts p and q must be two different parts in \[0, 3\]; got p=2, q=2"):
        parts.separating(2, 2)
    index, index_0 = (KNNIndex.build(X[rows[p]], 10, method="exact") for p in (1, 0))
    own = _own_graph(index_0, rows[0])
    plan = _query_plan(index_0, _kth_distance(own, 10), 0, 4, parts.splits)  # shard 0's rows read from its index
    answer = _search_taken(index, _take_planned(index_0, plan, 1), 10, rows[1])
    searched = np.zeros(rows[0].size, dtype=bool)
    searched[answer.rows] = True
    label = np.empty(X.shape[0], dtype=np.int64)
    label[parts.perm] = np.repeat(np.arange(4), np.diff(parts.bounds))
    has_neighbour_in_1 = np.any(label[idx[rows[0]]] == 1, axis=1)
    assert np.all(searched[has_neighbour_in_1]) and searched.mean() < 0.35  # measured 0.155 (0 for shards 2, 3)
    # the answer lists the searched rows only, each with 10 rows of shard 1
    assert answer.n_rows == rows[0].size
    assert answer.indices.shape == answer.distances.shape == (answer.rows.size, 10)
    assert np.all(np.isin(answer.indices, rows[1])) and np.all(np.diff(answer.rows) > 0)


def test_bad_parameters_name_parameter_range_and_value(roll):
    X = roll[0][:10]
    for bad, shown in [(0, "0"), (11, "11"), (2.0, r"2\.0"), ("2", "'2'"), (True, "True")]:
        with pytest.raises(ParameterError, match=rf"n_parts must be an integer in \[1, 10\]; got {shown}$"):
            bisection_partition_array(X, bad)
    with pytest.raises(InputDataError, match=r"Y must be a 2-D array with at least one row; got shape \(10,\)"):
        bisection_partition_array(X[:, 0], 2)
    with pytest.raises(ParameterError, match=r"block_bounds must be \(B \+ 1,\) increasing from 0; got \[0, 5, 5, 10\]"):
        bisection_partition(lambda fn, args: [], np.array([0, 5, 5, 10]), 2)
    Xn = X.copy()
    Xn[6, 3] = np.nan
    with pytest.raises(InputDataError, match="X must be finite; row 6 holds NaN or infinity"):
        bisection_partition_array(Xn, 2)


def test_sharded_graph_on_bisection_shards(client, roll):
    """Exact search per shard: the sharded graph on the bisection parts is the exact graph, in the original row
    order; the shards are the partition's parts."""
    from eigenflow.spectral.neighbours.sharded import sharded_knn_graph_futures

    X = roll[0]
    indices, distances = sharded_knn_graph(X, 10, n_shards=4, shard_method="exact", partition="bisection")
    ie, de = knn_graph(X, 10, method="exact")
    np.testing.assert_array_equal(indices, ie)
    np.testing.assert_array_equal(distances, de)
    futures, perm, bounds = sharded_knn_graph_futures(X, 10, n_shards=4, shard_method="exact",
                                                      partition="bisection", client=client)
    expected = bisection_partition_array(X, 4)
    np.testing.assert_array_equal(perm, expected.perm)
    block = futures[2].result()
    np.testing.assert_array_equal(block[0], ie[perm[bounds[2]:bounds[3]]])
    with pytest.raises(ParameterError, match=r"partition must be one of \['contiguous', 'bisection'\]; got 'metis'"):
        sharded_knn_graph(X, 10, n_shards=4, partition="metis")


def test_reverse_candidates_complete_the_merged_lists():
    # shard p = rows [10, 11, 12], shard q = rows [20, 21]; q's rows found 10 and 12 (row 21 found 12 at 0.5)
    answer = ShardAnswer(np.array([0, 1]), np.array([[10, 11], [12, 10]]),
                         np.array([[1.0, 3.0], [0.5, 2.0]], np.float32), 2)
    radius_p = np.array([1.5, 1.0, 0.6])
    pos, rows, dist = reverse_candidates(answer, np.array([20, 21]), np.array([10, 11, 12]), radius_p)
    np.testing.assert_array_equal(pos, [0, 2])  # 11 at 3.0 > 1.0 and 10 at 2.0 > 1.5 are dropped
    np.testing.assert_array_equal(rows, [20, 21])
    np.testing.assert_array_equal(dist, np.array([1.0, 0.5], np.float32))
    merged = (np.array([[11, 12], [10, 12], [11, 10]]), np.array([[0.2, 1.0], [0.3, 0.4], [0.1, 0.2]], np.float32))
    # row 0 gains 20 at 1.0 (tie with 12: the smaller index first); a repeated candidate counts once
    indices, distances = add_candidates(2, merged, (pos, rows, dist), (np.array([2, 2]), np.array([11, 21]),
                                                                       np.array([0.1, 0.5], np.float32)))
    np.testing.assert_array_equal(indices, [[11, 12], [10, 12], [11, 10]])
    wide = (np.column_stack([merged[0], [[99], [98], [97]]]),
            np.column_stack([merged[1], [[9.0], [9.0], [9.0]]]).astype(np.float32))
    indices, distances = add_candidates(3, wide, (pos, rows, dist), (np.array([2, 2]), np.array([11, 21]),
                                                                     np.array([0.1, 0.5], np.float32)))
    np.testing.assert_array_equal(indices, [[11, 12, 20], [10, 12, 98], [11, 10, 21]])  # 21 twice, 11 again: once
    np.testing.assert_array_equal(distances, np.array([[0.2, 1.0, 1.0], [0.3, 0.4, 9.0], [0.1, 0.2, 0.5]], np.float32))
    assert indices.dtype == np.int64 and distances.dtype == np.float32
