"""The fit set: which rows the fit stages fit on. Exact-duplicate collapse, the stratified labeled subset, and the
fit rows of :mod:`tasks.bodies.fit_rows` (positions of fit rows, the rows left out of the fit)."""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.spectral._arrays import distinct_rows
from eigenflow.spectral.datasets import stratified_subset
from eigenflow.spectral.errors import InputDataError


def test_distinct_rows_keeps_the_first_of_equal_x_and_label():
    X = np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0 + 1e-12]])
    rows = np.array([10, 11, 12, 13, 14])
    kept, dropped = distinct_rows(X, None, rows)
    np.testing.assert_array_equal(kept, [10, 11, 14])
    assert dropped == 2  # the near-duplicate stays
    kept, dropped = distinct_rows(X, np.array([0, 1, 0, 1, 0]), rows)  # a copy with another label is kept
    np.testing.assert_array_equal(kept, [10, 11, 13, 14])
    assert dropped == 1


@pytest.mark.parametrize("d", [5, 8])
@pytest.mark.parametrize("collide", [False, True])
def test_distinct_rows_hash_path_matches_the_exact_byte_comparison(monkeypatch, collide, d):
    """Duplicates found through the row hashes equal those of a plain unique over the row bytes (rows of 4-byte
    and of 8-byte words); with every hash colliding (forced) rows that differ are still kept."""
    import eigenflow.spectral._arrays as arrays

    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, d)).astype(np.float32)  # 20-byte rows: 4-byte words; 32-byte rows: 8-byte words
    X[rng.integers(0, 3000, 200)] = X[rng.integers(0, 3000, 200)]
    X[17] = -0.0 * X[17]  # -0.0 and 0.0 differ in their bytes: kept apart, as before
    if collide:
        monkeypatch.setattr(arrays, "row_hashes", lambda raw: np.zeros(raw.shape[0], dtype=np.uint64))
    rows = np.arange(3000) + 10
    kept, dropped = distinct_rows(X, None, rows)
    _, first = np.unique(X.view(np.dtype((np.void, 4 * d))).ravel(), return_index=True)
    np.testing.assert_array_equal(kept, rows[np.sort(first)])
    assert dropped == 3000 - first.size > 0


@pytest.mark.parametrize("b", [32, 20, 6, 7])
def test_row_hashes_are_the_words_times_the_constants_summed_modulo_2_64(b):
    """Each row's hash is the sum over its words of word * constant, wrapping modulo 2**64 (the one-pass product for
    8-byte words and the column loop for narrower ones give that same value); equal rows, equal hashes."""
    from eigenflow.spectral._arrays import row_hashes

    raw = np.random.default_rng(2).integers(0, 256, size=(500, b), dtype=np.uint8)
    raw[7] = raw[3]
    width = next(w for w in (8, 4, 2, 1) if b % w == 0)
    words = raw.view(np.dtype(f"<u{width}")).astype(object)
    constants = np.random.default_rng(0x5EED).integers(1, 2**63, size=b // width, dtype=np.uint64) | np.uint64(1)
    want = [sum(int(w) * int(c) for w, c in zip(row, constants)) % 2**64 for row in words]
    got = row_hashes(raw)
    assert got.dtype == np.uint64 and [int(h) for h in got] == want
    assert got[7] == got[3]



@pytest.mark.parametrize("collide", [False, True])
def test_repeated_positions_on_the_workers_are_the_rows_distinct_rows_drops(monkeypatch, thread_cluster, collide):
    """The copies found chunk by chunk on a cluster (hashes bucketed over 3 tasks, exact comparison per bucket)
    are exactly those :func:`distinct_rows` drops in one process, copies across chunks and inside one chunk
    included; with every hash colliding (forced) rows that differ are still kept; no copies: nothing."""
    import dask.array as da
    from distributed import Client

    import eigenflow.spectral.neighbours.sharded_duplicates as blocks
    from eigenflow.spectral.neighbours.sharded_duplicates import repeated_positions

    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 6)).astype(np.float32)
    X[rng.integers(0, 2000, 300)] = X[rng.integers(0, 2000, 300)]
    X[1500:1510] = X[3]  # ten copies of one row, in another chunk
    X[5] = X[4]  # a copy inside a chunk
    if collide:
        monkeypatch.setattr(blocks, "row_hashes", lambda raw: np.zeros(raw.shape[0], dtype=np.uint64))
    kept, n_dropped = distinct_rows(X, None, np.arange(2000))
    with Client(thread_cluster) as client:
        found = repeated_positions(da.from_array(X, chunks=(333, 6)), client, n_buckets=3)
        assert repeated_positions(da.from_array(X[kept], chunks=(333, 6)), client).size == 0
    np.testing.assert_array_equal(found, np.setdiff1d(np.arange(2000), kept))
    assert found.size == n_dropped >= 10 + 1


def test_stratified_subset_keeps_class_shares_and_at_least_two():
    y = np.r_[np.zeros(900, int), np.ones(90, int), np.full(10, 2), np.full(500, -1)]
    rows = np.arange(y.size) + 1000
    sub = stratified_subset(y, 100, 0, rows)
    counts = np.bincount(y[sub - 1000])
    assert sub.size == 100 and np.all(np.diff(sub) > 0) and counts.tolist() == [89, 9, 2]
    np.testing.assert_array_equal(stratified_subset(y, 5000, 0, rows), rows[y >= 0])  # all when fewer
    with pytest.raises(InputDataError, match="no labeled points"):
        stratified_subset(np.full(4, -1), 2, 0, np.arange(4))


@pytest.mark.parametrize("n_rows", [None, 12])
def test_fit_positions_by_table_and_by_search_agree_and_refuse_non_fit_rows(n_rows):
    """Rows -> positions in the sorted fit rows, by a position table (one process) or a binary search (a shard's
    worker): the same positions, and a neighbour that is not a fit row is a store error, not a wrong position."""
    from eigenflow.storage.errors import StoreFormatError
    from eigenflow.tasks.bodies.fit_rows import fit_positions

    fit_rows = np.array([0, 2, 3, 7, 11])
    neighbours = np.array([[2, 11, 0], [7, 3, 2]])
    np.testing.assert_array_equal(fit_positions(fit_rows, neighbours, n_rows=n_rows), [[1, 4, 0], [3, 2, 1]])
    with pytest.raises(StoreFormatError, match="not fit rows"):
        fit_positions(fit_rows, np.array([[2, 5]]), n_rows=n_rows)
    with pytest.raises(StoreFormatError, match="not fit rows"):
        fit_positions(fit_rows, np.array([[2, 12]]), n_rows=n_rows)


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.9])
def test_fit_rows_from_the_left_out_rows_equal_the_row_array(fraction):
    """:class:`tasks.bodies.fit_rows.FitRows` (the rows left out of the fit, no (n_fit,) array) against the sorted fit-row
    array: positions -> rows and back, per-chunk masks, removing fit positions; a left-out row is refused."""
    from eigenflow.storage.errors import StoreFormatError
    from eigenflow.tasks.bodies.fit_rows import FitRows, fit_rows_for, held_out_rows

    n = 1000
    fit = FitRows(n, held_out_rows(n, fraction, random_state=4))
    rows = fit_rows_for(n, fraction, random_state=4)
    assert fit.size == rows.size == n - round(fraction * n) and fit.complete == (fraction == 0)
    np.testing.assert_array_equal(fit.to_array(), rows)
    positions = np.arange(rows.size).reshape(-1, 1 if rows.size % 2 else 2)
    np.testing.assert_array_equal(fit.rows_at(positions), rows[positions])
    np.testing.assert_array_equal(fit.positions_of(rows[positions]), positions)
    mask = np.concatenate([fit.in_chunk(a, min(a + 64, n)) for a in range(0, n, 64)])
    np.testing.assert_array_equal(np.flatnonzero(mask), rows)
    np.testing.assert_array_equal(FitRows.from_rows(n, rows).left_out, fit.left_out)
    smaller = fit.without(np.array([0, 5, rows.size - 1]))
    np.testing.assert_array_equal(smaller.to_array(), np.delete(rows, [0, 5, rows.size - 1]))
    with pytest.raises(StoreFormatError, match="not fit rows"):
        smaller.positions_of(np.array([rows[5]]))
