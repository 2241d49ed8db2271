"""Operators against the dense matrices they represent, and eigensolves through them."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from eigenflow.spectral.eigen import eigensolve
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.operators.linear import (DaskRowBlockOperator, DiagonalOperator, IdentityOperator, LowRankOperator,
                                ScaledSum, SparseOperator)

N = 300


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # small problems: multi-threaded OpenBLAS is 10-60x slower on this shared 2-core machine
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def sym_sparse():
    M = sp.random(N, N, density=0.03, random_state=np.random.RandomState(0), format="csr")
    return ((M + M.T) / 2).tocsr()


@pytest.fixture(scope="module")
def block():
    return np.random.default_rng(1).standard_normal((N, 5))


def test_sparse_operator(sym_sparse, block):
    op = SparseOperator(sym_sparse)
    np.testing.assert_allclose(op @ block, sym_sparse @ block)
    lo, hi = op.spectral_bounds()
    w = sla.eigvalsh(sym_sparse.toarray())
    assert lo <= w[0] + 1e-12 and w[-1] <= hi + 1e-12


@pytest.mark.parametrize("as_dask", [False, True])
def test_low_rank_operator(block, as_dask):
    Phi = np.random.default_rng(2).standard_normal((N, 7))
    op = LowRankOperator(da.from_array(Phi, chunks=(64, 7)) if as_dask else Phi, scale=0.5)
    np.testing.assert_allclose(op @ block, 0.5 * Phi @ (Phi.T @ block), rtol=1e-10)
    w = sla.eigvalsh(0.5 * Phi @ Phi.T)
    lo, hi = op.spectral_bounds()
    assert lo == 0.0 and w[-1] <= hi


def test_low_rank_negative_scale_refused():
    with pytest.raises(ParameterError, match="scale must be >= 0"):
        LowRankOperator(np.ones((4, 2)), scale=-1.0)


def test_scaled_sum_and_shift(sym_sparse, block):
    d = np.linspace(0.0, 1.0, N)
    op = ScaledSum([sym_sparse, DiagonalOperator(d), IdentityOperator(N)], [1.0, -2.0, 0.25])
    dense = sym_sparse.toarray() - 2.0 * np.diag(d) + 0.25 * np.eye(N)
    np.testing.assert_allclose(op @ block, dense @ block, atol=1e-12)
    w = sla.eigvalsh(dense)
    lo, hi = op.spectral_bounds()
    assert lo <= w[0] and w[-1] <= hi
    with pytest.raises(InputDataError, match="one square shape"):
        ScaledSum([sym_sparse, IdentityOperator(N + 1)], [1.0, 1.0])
    with pytest.raises(ParameterError, match="equal length"):
        ScaledSum([sym_sparse], [1.0, 2.0])


@pytest.mark.parametrize("kind", ["csr", "dask"])
def test_dask_row_block_operator(sym_sparse, block, kind):
    M = sym_sparse if kind == "csr" else da.from_array(sym_sparse.toarray(), chunks=(70, N))
    op = DaskRowBlockOperator(M, block_rows=70, scheduler="threads")
    np.testing.assert_allclose(op @ block, sym_sparse @ block, atol=1e-12)
    np.testing.assert_allclose(op.matvec(block[:, 0]), sym_sparse @ block[:, 0], atol=1e-12)
    assert op.n_blocks == 5


def test_randomized_through_dask_operator_matches_dense(sym_sparse):
    # smallest of the shifted operator (PSD after the identity shift), Dask row blocks under the hood
    op = DaskRowBlockOperator(sym_sparse, block_rows=100, scheduler="threads")
    res = eigensolve(op, 3, solver="randomized", which="largest", random_state=0, max_iter=3000)
    w = sla.eigvalsh(sym_sparse.toarray())
    np.testing.assert_allclose(res.values, w[::-1][:3], atol=1e-6)
    assert res.info["bound_source"] == "gershgorin/operator"


def test_low_rank_eigensolve_matches_svd():
    Phi = np.random.default_rng(3).standard_normal((N, 10))
    res = eigensolve(LowRankOperator(Phi), 4, which="largest", solver="randomized", random_state=0)
    s = np.linalg.svd(Phi, compute_uv=False)
    np.testing.assert_allclose(res.values, s[:4] ** 2, rtol=1e-8)
