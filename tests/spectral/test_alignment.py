"""align_embedding against known rotations and scales, and on refits of LaplacianEigenmaps."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import block_diag
from scipy.stats import ortho_group
from sklearn.datasets import make_s_curve

from eigenflow.spectral.embedding import AlignedEmbedding, LaplacianEigenmaps, align_embedding
from eigenflow.spectral.embedding.alignment import eigenvalue_groups
from eigenflow.spectral.errors import InputDataError, ParameterError

SCALE = 0.37


@pytest.fixture(scope="module")
def Y_ref():
    return np.random.default_rng(0).standard_normal((300, 5))


def test_recovers_a_known_rotation_and_scale(Y_ref):
    Q = ortho_group.rvs(5, random_state=1)
    Y = Y_ref @ Q.T / SCALE  # Y Q SCALE = Y_ref
    aligned = align_embedding(Y, Y_ref)
    assert isinstance(aligned, AlignedEmbedding)
    np.testing.assert_allclose(aligned.rotation, Q, atol=1e-10)
    assert aligned.scale == pytest.approx(SCALE, abs=1e-10)
    np.testing.assert_allclose(aligned.apply(Y), Y_ref, atol=1e-10)
    assert aligned.groups == [(0, 5)]
    assert aligned.residual < 1e-10
    assert aligned.unaligned_residual > 1.0


def test_apply_maps_rows_outside_the_shared_ones(Y_ref):
    Q = ortho_group.rvs(5, random_state=2)
    Y = Y_ref @ Q.T / SCALE
    aligned = align_embedding(Y[:100], Y_ref[:100])
    np.testing.assert_allclose(aligned.apply(Y[100:]), Y_ref[100:], atol=1e-10)
    assert aligned.apply(np.zeros((0, 5))).shape == (0, 5)


def test_apply_keeps_float32_and_float64(Y_ref):
    Q = ortho_group.rvs(5, random_state=3)
    Y = Y_ref @ Q.T / SCALE
    aligned = align_embedding(Y.astype(np.float32), Y_ref.astype(np.float32))
    assert aligned.rotation.dtype == np.float64
    assert aligned.apply(Y.astype(np.float32)).dtype == np.float32
    out = aligned.apply(Y)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, Y_ref, atol=1e-5)
    assert aligned.apply(Y.astype(int)).dtype == np.float64


def test_no_translation_is_fitted(Y_ref):
    """A shifted copy is not matched exactly: only rotation and scale are fitted (module docstring)."""
    aligned = align_embedding(Y_ref + 10.0, Y_ref)
    assert aligned.residual > 0.1


def test_eigenvalue_groups_follow_the_relative_gap():
    assert eigenvalue_groups(np.array([1.0, 1.0005, 1.5, 2.0]), 1e-3) == [(0, 2), (2, 3), (3, 4)]
    assert eigenvalue_groups(np.array([1.0, 1.0005, 1.5, 2.0]), 0.0) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert eigenvalue_groups(np.array([1.0, 1.0005, 1.5, 2.0]), 1.0) == [(0, 4)]
    assert eigenvalue_groups(np.array([0.0, 0.0, 1e-12]), 1e-3) == [(0, 2), (2, 3)]
    assert eigenvalue_groups(np.array([0.3]), 1e-3) == [(0, 1)]


def test_eigenvalue_groups_restrict_the_rotation_to_blocks(Y_ref):
    eigenvalues = np.array([0.1, 0.1 + 1e-6, 0.1 + 2e-6, 0.5, 0.9])  # groups (0, 3), (3, 4), (4, 5)
    Q = block_diag(ortho_group.rvs(3, random_state=4), [[-1.0]], [[1.0]])
    Y = Y_ref @ Q.T / SCALE
    aligned = align_embedding(Y, Y_ref, eigenvalues=eigenvalues)
    assert aligned.groups == [(0, 3), (3, 4), (4, 5)]
    np.testing.assert_allclose(aligned.rotation, Q, atol=1e-10)
    assert aligned.rotation[3, 3] == -1.0 and aligned.rotation[4, 4] == 1.0
    assert aligned.scale == pytest.approx(SCALE, abs=1e-10)
    assert aligned.residual < 1e-10

    # a rotation that mixes the groups cannot be undone: the result stays block-diagonal
    Y_mixed = Y_ref @ ortho_group.rvs(5, random_state=5).T
    blocky = align_embedding(Y_mixed, Y_ref, eigenvalues=eigenvalues)
    off_block = np.ones((5, 5), bool)
    for start, stop in blocky.groups:
        off_block[start:stop, start:stop] = False
    assert np.all(blocky.rotation[off_block] == 0.0)
    assert set(np.abs(np.diag(blocky.rotation)[3:])) == {1.0}
    np.testing.assert_allclose(blocky.rotation @ blocky.rotation.T, np.eye(5), atol=1e-12)
    assert blocky.residual > align_embedding(Y_mixed, Y_ref).residual


def test_noise_leaves_a_residual_below_the_unaligned_one(Y_ref):
    rng = np.random.default_rng(6)
    Q = ortho_group.rvs(5, random_state=6)
    Y = (Y_ref + 0.05 * rng.standard_normal(Y_ref.shape)) @ Q.T / SCALE
    aligned = align_embedding(Y, Y_ref)
    assert 0.0 < aligned.residual < 0.1
    assert aligned.unaligned_residual > 10 * aligned.residual
    # noise of 0.05 per coordinate: median noise norm ~ 0.05 sqrt(5), over a spread of sqrt(5)
    assert aligned.residual == pytest.approx(0.05, rel=0.3)


def test_residual_is_relative_to_the_spread():
    Y_ref = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    assert align_embedding(-3.0 * Y_ref, Y_ref).residual == pytest.approx(0.0, abs=1e-15)
    # unaligned: rows moved by 0.2, 0.2, 0, 0 on rows of norm 1 -> median 0.1, spread 1
    moved = Y_ref + np.array([[0.2, 0.0], [0.0, 0.2], [0.0, 0.0], [0.0, 0.0]])
    assert align_embedding(moved, Y_ref).unaligned_residual == pytest.approx(0.1)


@pytest.fixture(scope="module")
def s_curve():
    return make_s_curve(4000, random_state=0)[0]


def _fit(X, random_state=0, eigen_solver="auto"):
    return LaplacianEigenmaps(n_components=4, n_neighbors=10, eigen_solver=eigen_solver,
                              random_state=random_state).fit(X)


def test_refit_on_permuted_rows_aligns_to_solver_tolerance(s_curve):
    """Same rows, permuted, another seed and an iterative solver: the same eigenmap up to solver tolerance.

    Both fits fix each column's sign (largest-|.| entry positive), so the unaligned figure is small here too.
    """
    X = s_curve[:2000]
    perm = np.random.default_rng(7).permutation(X.shape[0])
    first = _fit(X, random_state=0)
    second = _fit(X[perm], random_state=1, eigen_solver="lobpcg")
    Y = np.empty_like(second.embedding_)
    Y[perm] = second.embedding_  # back to the rows of X
    aligned = align_embedding(Y, first.embedding_, eigenvalues=second.eigenvalues_)
    print(f"permuted refit: residual {aligned.residual:.3e}, unaligned {aligned.unaligned_residual:.3e}, "
          f"groups {aligned.groups}, scale {aligned.scale:.12f}")
    assert aligned.residual < 1e-3
    assert aligned.scale == pytest.approx(1.0, abs=1e-3)
    assert len(aligned.groups) == 4  # well-separated eigenvalues: signs only


def test_refit_on_more_rows_aligns_the_shared_rows(s_curve):
    small = _fit(s_curve[:2000])
    large = _fit(s_curve)
    aligned = align_embedding(large.embedding_[:2000], small.embedding_)
    print(f"2000 vs 4000 rows: residual {aligned.residual:.3e}, unaligned {aligned.unaligned_residual:.3e}, "
          f"scale {aligned.scale:.4f}")
    assert aligned.residual < 0.25 * aligned.unaligned_residual
    assert aligned.residual < 0.1
    # the embedding's entries shrink like 1/sqrt(n): twice the rows -> a scale near sqrt(2)
    assert aligned.scale == pytest.approx(np.sqrt(2.0), rel=0.1)


@pytest.mark.parametrize("Y, Y_ref, match", [
    (np.ones((4, 2)), np.ones((4, 3)), r"Y \(4, 2\) and Y_ref \(4, 3\)|Y_ref \(4, 3\)"),
    (np.ones((4, 2)), np.ones((5, 2)), r"Y_ref \(5, 2\)"),
    (np.ones(4), np.ones(4), "Y"),
    (np.ones((4, 2)), np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0], [1.0, 1.0]]), "Y_ref contains NaN"),
    (np.full((4, 2), np.inf), np.ones((4, 2)), "Y contains infinity"),
    (np.zeros((0, 2)), np.zeros((0, 2)), "Y"),
    (np.zeros((4, 2)), np.ones((4, 2)), r"Y \(4, 2\) is all zeros"),
    (np.ones((4, 2)), np.zeros((4, 2)), r"Y_ref \(4, 2\) is all zeros"),
])
def test_invalid_data_is_refused(Y, Y_ref, match):
    with pytest.raises(InputDataError, match=match):
        align_embedding(Y, Y_ref)


def test_invalid_parameters_are_refused(Y_ref):
    with pytest.raises(InputDataError, match=r"eigenvalues must be 5 .*got shape \(4,\)"):
        align_embedding(Y_ref, Y_ref, eigenvalues=np.ones(4))
    with pytest.raises(InputDataError, match=r"eigenvalues must be 5 .*got shape \(5,\): \[0.1 0.2 nan 0.4 0.5\]"):
        align_embedding(Y_ref, Y_ref, eigenvalues=[0.1, 0.2, np.nan, 0.4, 0.5])
    with pytest.raises(InputDataError, match=r"eigenvalues must be 5 .*got 'small'"):
        align_embedding(Y_ref, Y_ref, eigenvalues="small")
    with pytest.raises(ParameterError, match=r"group_tol must be a real number in \[0.0, inf\); got -0.1"):
        align_embedding(Y_ref, Y_ref, group_tol=-0.1)
    with pytest.raises(ParameterError, match="group_tol"):
        align_embedding(Y_ref, Y_ref, group_tol="tight")
    aligned = align_embedding(Y_ref, Y_ref)
    with pytest.raises(InputDataError, match=r"Z must have 5 columns.*\(3, 4\)"):
        aligned.apply(np.ones((3, 4)))
    with pytest.raises(InputDataError, match="Z contains NaN"):
        aligned.apply(np.full((3, 5), np.nan))


def test_uncorrelated_embeddings_are_refused():
    Y = np.array([[1.0, 0.0], [0.0, 0.0]])
    Y_ref = np.array([[0.0, 0.0], [0.0, 1.0]])  # Y^T Y_ref = 0: no positive scale
    with pytest.raises(InputDataError, match="no positive scale"):
        align_embedding(Y, Y_ref)
