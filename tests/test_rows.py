"""Row helpers the fit stages use: exact-duplicate collapse and the stratified labeled subset."""

from __future__ import annotations

import numpy as np
import pytest

from spectral._arrays import distinct_rows
from spectral.datasets import stratified_subset
from spectral.errors import InputDataError


def test_distinct_rows_keeps_the_first_of_equal_x_and_label():
    X = np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0 + 1e-12]])
    rows = np.array([10, 11, 12, 13, 14])
    kept, dropped = distinct_rows(X, None, rows)
    np.testing.assert_array_equal(kept, [10, 11, 14])
    assert dropped == 2  # the near-duplicate stays
    kept, dropped = distinct_rows(X, np.array([0, 1, 0, 1, 0]), rows)  # a copy with another label is kept
    np.testing.assert_array_equal(kept, [10, 11, 13, 14])
    assert dropped == 1


def test_stratified_subset_keeps_class_shares_and_at_least_two():
    y = np.r_[np.zeros(900, int), np.ones(90, int), np.full(10, 2), np.full(500, -1)]
    rows = np.arange(y.size) + 1000
    sub = stratified_subset(y, 100, 0, rows)
    counts = np.bincount(y[sub - 1000])
    assert sub.size == 100 and np.all(np.diff(sub) > 0) and counts.tolist() == [89, 9, 2]
    np.testing.assert_array_equal(stratified_subset(y, 5000, 0, rows), rows[y >= 0])  # all when fewer
    with pytest.raises(InputDataError, match="no labeled points"):
        stratified_subset(np.full(4, -1), 2, 0, np.arange(4))
