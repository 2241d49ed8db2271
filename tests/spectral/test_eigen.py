"""Every eigensolver against dense LAPACK ``eigh`` under one contract (:class:`SolverContract`).

Tolerances (documented per solver on each subclass): ``value_atol`` bounds the absolute eigenvalue error
relative to ``||A||_inf`` (the problems have ``||A|| ~ 1-2``), ``angle_tol`` the largest principal angle
(radians) between the computed and the reference eigenvector subspaces. The reference is
``scipy.linalg.eigh`` on the same matrix, never one of our solvers.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.csgraph import laplacian as csgraph_laplacian
from sklearn.neighbors import kneighbors_graph
from threadpoolctl import threadpool_limits

from eigenflow.spectral.eigen import EigenResult, eigensolve
from eigenflow.spectral.errors import ConvergenceError, ParameterError
from eigenflow.spectral.operators.kernels import pairwise_kernel

N = 240
K = 4


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # small problems: multi-threaded OpenBLAS is 10-60x slower on this shared 2-core machine
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _data(seed=0, n=N):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 3 * np.pi, n)
    return np.c_[t * np.cos(t), t * np.sin(t), rng.uniform(0, 4, n)] / 5.0


@pytest.fixture(scope="module")
def laplacian_case():
    """Symmetric normalized Laplacian of a connected 10-NN graph (sparse), smallest eigenpairs."""
    W = kneighbors_graph(_data(), 10, include_self=False)
    W = ((W + W.T) > 0).astype(float)
    L = sp.csr_matrix(csgraph_laplacian(W, normed=True))
    return L, sla.eigh(L.toarray())


@pytest.fixture(scope="module")
def kernel_case():
    """Dense RBF kernel matrix (PSD), largest eigenpairs; also the data for the Nystrom solver."""
    X = _data(1)
    Kmat = pairwise_kernel(X, kernel="rbf", gamma=2.0)
    return X, Kmat, sla.eigh(Kmat)


def max_angle(U, V):
    return float(np.max(sla.subspace_angles(U, V)))


class SolverContract:
    """Contract every solver satisfies (subclasses set ``solver``, ``options`` and tolerances)."""

    solver: str
    options: dict = {}
    value_atol = 1e-8
    angle_tol = 1e-6
    supports_smallest = True

    def solve(self, A, k, **kw):
        return eigensolve(A, k, solver=self.solver, random_state=0, **{**self.options, **kw})

    def solve_kernel(self, case, k, **kw):
        X, Kmat, _ = case
        return self.solve(Kmat, k, which="largest", **kw)

    def test_smallest_matches_dense(self, laplacian_case):
        if not self.supports_smallest:
            pytest.skip("solver computes largest eigenpairs only (tested in test_smallest_refused)")
        L, (w, U) = laplacian_case
        res = self.solve(L, K, which="smallest")
        norm = abs(L).sum(axis=1).max()
        assert np.max(np.abs(res.values - w[:K])) <= self.value_atol * norm
        assert max_angle(res.vectors, U[:, :K]) <= self.angle_tol

    def test_largest_matches_dense(self, kernel_case):
        _, Kmat, (w, U) = kernel_case
        res = self.solve_kernel(kernel_case, K)
        norm = np.abs(Kmat).sum(axis=1).max()
        assert np.max(np.abs(res.values - w[::-1][:K])) <= self.value_atol * norm
        assert max_angle(res.vectors, U[:, ::-1][:, :K]) <= self.angle_tol

    def test_result_contract(self, kernel_case):
        X, Kmat, _ = kernel_case
        res = self.solve_kernel(kernel_case, K)
        assert isinstance(res, EigenResult) and res.solver == self.solver and res.converged
        assert res.values.shape == (K,) and res.vectors.shape == (N, K) and res.residuals.shape == (K,)
        assert np.all(np.diff(res.values) <= 0)  # descending for "largest"
        peak = res.vectors[np.argmax(np.abs(res.vectors), axis=0), np.arange(K)]
        assert np.all(peak > 0)  # deterministic signs
        again = self.solve_kernel(kernel_case, K)
        np.testing.assert_allclose(again.vectors, res.vectors, atol=1e-10)  # same seed, same output
        # residuals are ||K v - lambda v|| of the returned unit vectors (recomputed here)
        np.testing.assert_allclose(np.linalg.norm(res.vectors, axis=0), 1.0, atol=1e-8)
        recomputed = np.linalg.norm(Kmat @ res.vectors - res.vectors * res.values, axis=0)
        np.testing.assert_allclose(res.residuals, recomputed, rtol=0.5, atol=1e-10)

    def test_smallest_ascending(self, laplacian_case):
        if not self.supports_smallest:
            pytest.skip("solver computes largest eigenpairs only")
        res = self.solve(laplacian_case[0], K, which="smallest")
        assert np.all(np.diff(res.values) >= 0)

    def test_nonconvergence_reported(self, kernel_case):
        kw = self.failing_options()
        with pytest.raises(ConvergenceError, match=rf"eigensolver '{self.solver}'.*(did not converge|residual)"):
            self.solve_kernel(kernel_case, K, **kw)
        res = self.solve_kernel(kernel_case, K, raise_on_failure=False, **kw)
        assert res.converged is False

    def failing_options(self) -> dict:
        return {"tol": 1e-13, "max_iter": 1}

    def test_repeated_eigenvalues_subspace(self):
        # spectrum 1 (x3), then 2, 3, ...: the 3 smallest span a well-defined subspace, the basis does not
        rng = np.random.default_rng(3)
        Q, _ = np.linalg.qr(rng.standard_normal((120, 120)))
        lam = np.r_[1.0, 1.0, 1.0, np.linspace(2.0, 5.0, 117)]
        A = (Q * lam) @ Q.T
        A = (A + A.T) / 2
        if not self.supports_smallest:
            res = self.solve(-A + 6.0 * np.eye(120), 3, which="largest")  # 5, 5, 5 on top
        else:
            res = self.solve(A, 3, which="smallest")
        assert max_angle(res.vectors, Q[:, :3]) <= max(self.angle_tol, 1e-6) * 10

    def test_n_components_out_of_range(self, kernel_case):
        with pytest.raises(ParameterError, match=r"n_components must be an integer in \[1, "):
            self.solve_kernel(kernel_case, 0)
        with pytest.raises(ParameterError, match=r"n_components must be an integer in \[1, "):
            self.solve_kernel(kernel_case, N + 1)


class TestDense(SolverContract):
    solver = "dense"  # LAPACK: exact to round-off
    value_atol, angle_tol = 1e-12, 1e-8

    def test_nonconvergence_reported(self, kernel_case):
        # direct method: no iteration to fail; it still reports residuals and n_iter = 0
        res = self.solve_kernel(kernel_case, K)
        assert res.converged and res.n_iter == 0 and np.all(res.residuals < 1e-10)

    def test_all_pairs_allowed(self, kernel_case):
        assert self.solve_kernel(kernel_case, N).values.shape == (N,)


class TestArpack(SolverContract):
    solver = "arpack"  # ARPACK to machine precision (tol=0): residuals ~1e-14
    options = {"sigma": -1e-5}
    value_atol, angle_tol = 1e-10, 1e-6

    def failing_options(self):
        return {"max_iter": 1, "ncv": 9}  # one Lanczos restart of a 9-vector basis: ARPACK gives up

    def test_k_equal_n_refused(self, kernel_case):
        with pytest.raises(ParameterError, match=r"n_components < n"):
            self.solve_kernel(kernel_case, N)


class TestLobpcg(SolverContract):
    solver = "lobpcg"  # AMG-preconditioned for the Laplacian; tol 1e-6 * ||A|| on residuals
    value_atol, angle_tol = 1e-9, 1e-3

    def failing_options(self):
        return {"tol": 1e-13, "max_iter": 2}

    def test_small_n_refused(self):
        with pytest.raises(ParameterError, match=r"needs n >= 5 \* block size"):
            eigensolve(np.eye(12) * np.arange(12), 4, solver="lobpcg")


class TestRandomized(SolverContract):
    solver = "randomized"  # Chebyshev-filtered subspace iteration; tol 1e-6 * ||A||
    value_atol, angle_tol = 1e-9, 1e-3

    @pytest.mark.parametrize("method", ["subspace", "krylov"])
    def test_other_methods_match_dense(self, laplacian_case, method):
        L, (w, U) = laplacian_case
        res = eigensolve(L, K, solver="randomized", method=method, tol=1e-6, spectral_bounds=(0, 2),
                         random_state=0, max_iter=3000)
        assert np.max(np.abs(res.values - w[:K])) <= 1e-9
        assert max_angle(res.vectors, U[:, :K]) <= 1e-3

    def test_indefinite_both_ends(self):
        # no PSD requirement: the Gershgorin bound shifts either end (documented handling)
        rng = np.random.default_rng(5)
        M = rng.standard_normal((150, 150))
        A = (M + M.T) / 2
        w = sla.eigvalsh(A)
        lo = eigensolve(A, 3, solver="randomized", which="smallest", random_state=0, max_iter=2000)
        hi = eigensolve(A, 3, solver="randomized", which="largest", random_state=0, max_iter=2000)
        np.testing.assert_allclose(lo.values, w[:3], atol=1e-6)
        np.testing.assert_allclose(hi.values, w[::-1][:3], atol=1e-6)

    def test_generalized_refused(self, kernel_case):
        with pytest.raises(ParameterError, match="standard problems"):
            eigensolve(kernel_case[1], 2, B=np.eye(N), solver="randomized")

    @staticmethod
    def _circles_rbf(n, gamma, center):
        from sklearn.datasets import make_circles
        from sklearn.metrics.pairwise import rbf_kernel

        Kx = rbf_kernel(make_circles(n, factor=0.3, noise=0.05, random_state=0)[0], gamma=gamma)
        if center:
            H = np.eye(n) - 1.0 / n
            Kx = H @ Kx @ H
            Kx = (Kx + Kx.T) / 2
        return Kx

    @pytest.mark.parametrize("k, tol", [(10, None), (20, 1e-9)])
    def test_fast_decaying_kernel_spectrum_matches_dense(self, k, tol):
        # a kernel spectrum decays fast: the Chebyshev filter's degree is capped so the k-th wanted direction
        # is not lost next to the first (it used to stop at a wrong pair 7 after max_iter)
        Kc = self._circles_rbf(1000, 0.5, center=True)
        w = sla.eigvalsh(Kc)[::-1][:k]
        # (k = 20 reaches eigenvalues ~0.002: a residual tolerance below the default 1e-6 ||A|| ~ 1e-4 is
        # needed for 1e-6 relative accuracy there)
        res = eigensolve(Kc, k, which="largest", solver="randomized", random_state=0, tol=tol)
        np.testing.assert_allclose(res.values, w, rtol=1e-6, atol=0)

    def test_bare_operator_of_psd_kernel_bounds_without_arpack(self):
        # a bare LinearOperator (no entries, no spectral_bounds): the bound of the end opposite to the wanted
        # one is a fixed-step Lanczos estimate, not ARPACK on the cluster of ~0 eigenvalues of a PSD kernel
        from scipy.sparse.linalg import aslinearoperator

        Kx = self._circles_rbf(300, 0.5, center=False)
        w = sla.eigvalsh(Kx)[::-1][:10]
        res = eigensolve(aslinearoperator(Kx), 10, which="largest", solver="randomized")
        assert res.info["bound_source"] == "lanczos-estimate"
        np.testing.assert_allclose(res.values, w, rtol=1e-6, atol=0)

    def test_lanczos_bounds_enclose_the_spectrum(self):
        from eigenflow.spectral.eigen.randomized import lanczos_bounds

        rng = np.random.default_rng(3)
        M = rng.standard_normal((200, 200))
        A = (M + M.T) / 2
        w = sla.eigvalsh(A)
        lo, hi = lanczos_bounds(A, 200, np.random.default_rng(0))
        assert lo <= w[0] and hi >= w[-1]
        assert hi - lo <= 1.5 * (w[-1] - w[0])


class TestNystrom(SolverContract):
    solver = "nystrom"  # all points as landmarks: the Nystrom approximation is exact (round-off only)
    value_atol, angle_tol = 1e-9, 1e-6
    supports_smallest = False

    def solve(self, A, k, **kw):
        # input is data; for a matrix test the "data" are the rows of an identity-free kernel: use X
        raise AssertionError("TestNystrom uses solve_kernel")

    def solve_kernel(self, case, k, **kw):
        X = case[0]
        opts = {"kernel": "rbf", "gamma": 2.0, "n_landmarks": N}
        opts.update(kw)
        return eigensolve(X, k, solver="nystrom", which="largest", random_state=0, **opts)

    def failing_options(self):
        return {"tol": 1e-6, "n_landmarks": 8}

    def test_repeated_eigenvalues_subspace(self):
        # two identical, well separated clusters: the top-2 eigenvalues of the RBF kernel coincide
        rng = np.random.default_rng(2)
        base = rng.normal(scale=0.1, size=(60, 2))
        X = np.vstack([base, base + 50.0])
        Kmat = pairwise_kernel(X, kernel="rbf", gamma=1.0)
        w, U = sla.eigh(Kmat)
        res = eigensolve(X, 2, solver="nystrom", which="largest", kernel="rbf", gamma=1.0, n_landmarks=120)
        assert abs(w[-1] - w[-2]) < 1e-8 * w[-1]
        assert max_angle(res.vectors, U[:, -2:]) < 1e-6

    def test_smallest_refused(self, kernel_case):
        with pytest.raises(ParameterError, match="which='largest'"):
            eigensolve(kernel_case[0], 2, solver="nystrom", which="smallest")


def test_auto_reports_its_pick(laplacian_case):
    res = eigensolve(laplacian_case[0], 3)
    assert res.solver == "dense"  # n = 240 <= AUTO_DENSE_MAX_N


def test_auto_never_picks_a_solver_that_refuses():
    # above AUTO_DENSE_MAX_N: LOBPCG refuses n < 5 x block (an explicit choice keeps its clear error), the
    # randomized solver refuses a generalized problem; "auto" picks dense / arpack there, checked against eigh
    n = 2050
    L = sp.csr_matrix(csgraph_laplacian(sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1]), normed=True))
    with pytest.raises(ParameterError, match=r"needs n >= 5 \* block size"):
        eigensolve(L, 420, solver="lobpcg")
    res = eigensolve(L, 420)
    assert res.solver == "dense"
    np.testing.assert_allclose(res.values, sla.eigvalsh(L.toarray())[:420], atol=1e-10)
    A = (sp.diags(np.r_[10.0, 9.0, 8.0, np.random.default_rng(0).uniform(0, 1, n - 3)]) + 0.01 * L).tocsr()
    B = sp.diags(np.linspace(1.0, 2.0, n)).tocsr()
    with pytest.raises(ParameterError, match="standard problems"):
        eigensolve(A, 3, B=B, which="largest", solver="randomized")
    gen = eigensolve(A, 3, B=B, which="largest", random_state=0)
    assert gen.solver == "arpack"
    ref = sla.eigh(A.toarray(), B.toarray(), eigvals_only=True, subset_by_index=[n - 3, n - 1])[::-1]
    np.testing.assert_allclose(gen.values, ref, rtol=1e-6, atol=1e-8)


def test_bad_parameters_named():
    A = np.eye(10)
    with pytest.raises(ParameterError, match=r"solver must be one of .*got 'eigh'"):
        eigensolve(A, 2, solver="eigh")
    with pytest.raises(ParameterError, match=r"which must be one of .*got 'LM'"):
        eigensolve(A, 2, which="LM")
    with pytest.raises(ParameterError, match=r"tol must be a real number in \(0.0, inf\); got -1"):
        eigensolve(A, 2, tol=-1.0)
    with pytest.raises(ParameterError, match="accepts options"):
        eigensolve(A, 2, solver="arpack", shift=3)


def test_asymmetric_refused():
    from eigenflow.spectral.errors import InputDataError

    with pytest.raises(InputDataError, match="must be symmetric"):
        eigensolve(np.triu(np.ones((6, 6))), 2, solver="dense")


class TestLobpcgBlockAMG(TestLobpcg):
    """LOBPCG with the block Jacobi V-cycle on pyamg's hierarchy (same tolerances as TestLobpcg)."""

    options = {"preconditioner": "block_amg"}

    def solve_kernel(self, case, k, **kw):
        # AMG needs a sparse A; the kernel case is dense: run it without a preconditioner, in float32
        return self.solve(case[1], k, which="largest", **{"preconditioner": None, **kw})

    def test_repeated_eigenvalues_subspace(self):
        rng = np.random.default_rng(3)
        Q, _ = np.linalg.qr(rng.standard_normal((120, 120)))
        lam = np.r_[1.0, 1.0, 1.0, np.linspace(2.0, 5.0, 117)]
        A = sp.csr_matrix((Q * lam) @ Q.T)
        A = (A + A.T) / 2
        res = self.solve(sp.csr_matrix(A), 3, which="smallest", tol=1e-4)
        assert max_angle(res.vectors, Q[:, :3]) <= 1e-3


def test_lobpcg_float32_block_amg_on_larger_graph():
    # the benchmark's configuration (float32, block V-cycle, X0 = sqrt(degrees)) at a tolerance float32 can
    # reach (1e-4 absolute residual); eigenvalues vs dense eigh to 1e-5, subspace angle < 0.05 rad
    W = kneighbors_graph(_data(7, n=1200), 10, include_self=False)
    W = ((W + W.T) > 0).astype(float)
    L = sp.csr_matrix(csgraph_laplacian(W, normed=True))
    w, U = sla.eigh(L.toarray(), subset_by_index=[0, 5])
    deg = np.asarray(W.sum(axis=1)).ravel()
    res = eigensolve(L, 5, solver="lobpcg", tol=1e-4, random_state=0, preconditioner="block_amg",
                     dtype="float32", X0=np.sqrt(deg)[:, None])
    assert res.converged and np.all(res.residuals <= 1e-4)
    np.testing.assert_allclose(res.values, w[:5], atol=1e-5)
    assert max_angle(res.vectors, U[:, :5]) < 0.05


@pytest.fixture(scope="module")
def multilevel_case():
    """Normalized Laplacian of a 3,000-node 10-NN graph: its AMG hierarchy has a coarse level for k = 3."""
    W = kneighbors_graph(_data(11, n=3000), 10, include_self=False)
    W = ((W + W.T) > 0).astype(float)
    L = sp.csr_matrix(csgraph_laplacian(W, normed=True))
    return L, sla.eigh(L.toarray(), subset_by_index=[0, 3])


@pytest.mark.parametrize("reorder", ["rcm", None])
def test_lobpcg_multilevel_start_against_dense(multilevel_case, reorder):
    # the coarse-to-fine start (spectral.eigen._multilevel) with and without the RCM renumbering: same
    # contract as TestLobpcg (eigenvalues to 1e-6, subspace angle < 1e-3 at tol 1e-7)
    L, (w, U) = multilevel_case
    res = eigensolve(L, 3, solver="lobpcg", tol=1e-7, random_state=0, reorder=reorder)
    assert res.info["start"] == "multilevel" and res.info["reorder"] == ("rcm" if reorder else "none")
    assert res.info["multilevel"]["coarse_level"] >= 1
    assert res.converged and np.all(res.residuals <= 1e-7)
    np.testing.assert_allclose(res.values, w[:3], atol=1e-6)
    assert max_angle(res.vectors, U[:, :3]) < 1e-3


def test_lobpcg_multilevel_start_needs_few_iterations(multilevel_case):
    # the point of the multilevel start: far fewer level-0 iterations than a random block to the same tol
    L, _ = multilevel_case
    ml = eigensolve(L, 3, solver="lobpcg", tol=1e-6, random_state=0)
    rnd = eigensolve(L, 3, solver="lobpcg", tol=1e-6, random_state=0, start="random")
    assert rnd.info["start"] == "random" and ml.converged and rnd.converged
    assert ml.n_iter < rnd.n_iter


def test_lobpcg_multilevel_generalized(multilevel_case):
    # A v = lambda B v with a sparse SPD B: the coarse levels carry P^T B P (Galerkin pencil)
    L, _ = multilevel_case
    d = np.random.default_rng(0).uniform(0.5, 2.0, L.shape[0])
    B = sp.diags(d).tocsr()
    w, U = sla.eigh(L.toarray(), np.diag(d), subset_by_index=[0, 2])
    res = eigensolve(L, 3, B=B, solver="lobpcg", tol=1e-7, random_state=0, reorder="rcm")
    assert res.info["start"] == "multilevel"
    np.testing.assert_allclose(res.values, w, atol=1e-6)
    assert max_angle(res.vectors, U) < 1e-3


def test_lobpcg_start_option_errors(multilevel_case):
    L, _ = multilevel_case
    with pytest.raises(ParameterError, match="do not pass X0"):
        eigensolve(L, 3, solver="lobpcg", start="multilevel", X0=np.ones(L.shape[0]))
    with pytest.raises(ParameterError, match="needs preconditioner='amg' or 'block_amg'"):
        eigensolve(L, 3, solver="lobpcg", start="multilevel", preconditioner=None)
    with pytest.raises(ParameterError, match="start must be 'auto', 'multilevel' or 'random'; got 'coarse'"):
        eigensolve(L, 3, solver="lobpcg", start="coarse")
    with pytest.raises(ParameterError, match="reorder must be 'auto', 'rcm' or None; got 'metis'"):
        eigensolve(L, 3, solver="lobpcg", reorder="metis")
    with pytest.raises(ParameterError, match="no coarse level with >= 2000 nodes"):
        eigensolve(L, 200, solver="lobpcg", start="multilevel", max_iter=1)


def test_sign_flip_matches_scikit_learn_rule():
    """The one sign rule equals scikit-learn's _deterministic_vector_sign_flip (which works on rows)."""
    from sklearn.utils.extmath import _deterministic_vector_sign_flip

    from eigenflow.spectral.eigen import sign_flip

    V = np.random.default_rng(3).standard_normal((40, 6))
    V[:, 2] = 0.0  # an all-zero column stays zero
    out = sign_flip(V)
    np.testing.assert_array_equal(out, _deterministic_vector_sign_flip(V.T.copy()).T)
    np.testing.assert_array_equal(np.abs(out), np.abs(V))
    assert out is not V


def test_solver_registry_subsets_are_derived_from_one_registry():
    from eigenflow.spectral.eigen import MATRIX_SOLVERS, OPERATOR_SOLVERS, SOLVERS
    from eigenflow.spectral.embedding.eigenmaps import EIGEN_SOLVERS

    assert EIGEN_SOLVERS is SOLVERS
    assert "nystrom" in SOLVERS and "nystrom" not in MATRIX_SOLVERS
    assert set(OPERATOR_SOLVERS) < set(MATRIX_SOLVERS) < set(SOLVERS)
    assert "dense" not in OPERATOR_SOLVERS and "auto" not in OPERATOR_SOLVERS


def test_amg_setup_restores_the_matrix_bit_for_bit_and_shares_level_0():
    """The AMG setup shifts a Laplacian's stored diagonal in place and writes the original values back: the
    matrix is unchanged bit for bit and is the hierarchy's level 0 (no shifted copy); a matrix without a stored
    diagonal entry in some row gets the shifted copy instead."""
    import scipy.sparse as sp

    import eigenflow.spectral._sparse as sparse_helpers
    from eigenflow.spectral.eigen.lobpcg import amg_hierarchy
    from eigenflow.spectral.graph.laplacian import laplacian

    W = sp.random(400, 400, density=0.03, random_state=1, format="csr")
    W = (W + W.T + sp.diags(np.ones(399), 1) + sp.diags(np.ones(399), -1)).tocsr()
    W.setdiag(0)
    W.eliminate_zeros()
    L = sp.csr_matrix(laplacian(W, normalization="symmetric")[0])
    L.sort_indices()
    before = L.data.copy()
    ml = amg_hierarchy(L)
    assert ml.levels[0].A is L and np.array_equal(L.data, before)
    positions = sparse_helpers.diagonal_positions(L)
    assert np.array_equal(L.data[positions], L.diagonal())
    no_diagonal = sp.csr_matrix(W)
    assert sparse_helpers.diagonal_positions(no_diagonal) is None
    ml2 = amg_hierarchy(no_diagonal)
    assert ml2.levels[0].A is not no_diagonal


def test_in_place_reordering_restores_the_matrix_and_matches_the_copy_path():
    """RCM reordering in place (one copy of A during the solve): the result equals the permuted-copy path's, the
    caller's matrix is unchanged bit for bit afterwards, and a read-only matrix takes the copy path."""
    import eigenflow.spectral._sparse as sparse_helpers
    from eigenflow.spectral.eigen import _reorder

    W = kneighbors_graph(_data(5, n=2500), 10, include_self=False)
    L = sp.csr_matrix(csgraph_laplacian(((W + W.T) > 0).astype(float), normed=True))
    L.sort_indices()
    before = (L.data.copy(), L.indices.copy(), L.indptr.copy())
    res = eigensolve(L, 3, solver="lobpcg", random_state=0, reorder="rcm")
    assert res.info["reorder_in_place"] and res.converged
    assert all(np.array_equal(a, b) for a, b in zip((L.data, L.indices, L.indptr), before))
    frozen = L.copy()
    for a in (frozen.data, frozen.indices, frozen.indptr):
        a.flags.writeable = False
    copied = eigensolve(frozen, 3, solver="lobpcg", random_state=0, reorder="rcm")
    assert not copied.info["reorder_in_place"]
    np.testing.assert_array_equal(copied.values, res.values)
    np.testing.assert_array_equal(copied.vectors, res.vectors)
    perm = np.random.default_rng(0).permutation(L.shape[0])
    sparse_helpers.ROW_BLOCK, block = 333, sparse_helpers.ROW_BLOCK  # several row blocks
    try:
        moved = L.copy()
        _reorder.permute_symmetric_in_place(moved, perm)
    finally:
        sparse_helpers.ROW_BLOCK = block
    reference = _reorder.permute_symmetric(L, perm)
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(moved, name), getattr(reference, name))
    _reorder.permute_symmetric_in_place(moved, _reorder.inverse_permutation(perm))
    assert all(np.array_equal(a, b) for a, b in zip((moved.data, moved.indices, moved.indptr), before))


def test_shared_transfer_operators_give_the_same_v_cycle(multilevel_case):
    """CSR P and its CSC transpose view as R (no BSR pair, no CSR copies): the same preconditioner output."""
    from eigenflow.spectral.eigen._block_amg import BlockVCycle, share_transfer_operators
    from eigenflow.spectral.eigen.lobpcg import amg_hierarchy

    L = multilevel_case[0].copy()
    ml = amg_hierarchy(L)
    B = np.random.default_rng(0).standard_normal((L.shape[0], 3))
    expected = BlockVCycle(ml) @ B
    share_transfer_operators(ml)
    for lvl in ml.levels[:-1]:
        assert lvl.P.format == "csr" and lvl.R.format == "csc" and np.shares_memory(lvl.R.data, lvl.P.data)
    np.testing.assert_allclose(BlockVCycle(ml) @ B, expected, rtol=1e-12, atol=1e-12)


def test_default_amg_strength_gives_pyamg_default_hierarchy(multilevel_case):
    """strength=None (A as its own strength graph) builds the hierarchy of pyamg's default symmetric strength
    with theta = 0, level by level (both built by pyamg)."""
    from pyamg import smoothed_aggregation_solver

    from eigenflow.spectral.eigen.lobpcg import DEFAULT_AMG_OPTIONS

    assert DEFAULT_AMG_OPTIONS["strength"] is None
    L = sp.csr_matrix(multilevel_case[0] + 1e-5 * sp.identity(multilevel_case[0].shape[0], format="csr"))
    ours = smoothed_aggregation_solver(L, **DEFAULT_AMG_OPTIONS)
    theirs = smoothed_aggregation_solver(L, **{k: v for k, v in DEFAULT_AMG_OPTIONS.items() if k != "strength"})
    assert len(ours.levels) == len(theirs.levels) > 2
    for a, b in zip(ours.levels, theirs.levels):
        assert abs(sp.csr_matrix(a.A) - sp.csr_matrix(b.A)).max() <= 1e-14
        if hasattr(b, "P"):
            assert abs(sp.csr_matrix(a.P) - sp.csr_matrix(b.P)).max() <= 1e-14


def test_lean_finest_level_matches_pyamg(multilevel_case, monkeypatch):
    """The default hierarchy's finest level built by row blocks (several blocks here) equals pyamg's own
    smoothed_aggregation_solver with the same options: P_0, the candidates and the coarse matrix A_1 to
    round-off. pyamg then builds the coarser levels from A_1 in both cases; its aggregation there can break ties
    differently on the round-off-level differences, so below level 1 the check is the solve: the same
    eigenpairs in as many LOBPCG iterations (+-1) with either hierarchy."""
    from pyamg import smoothed_aggregation_solver

    import eigenflow.spectral._sparse as sparse_helpers
    from eigenflow.spectral.eigen import _amg_setup, lobpcg

    monkeypatch.setattr(sparse_helpers, "ROW_BLOCK", 700)
    L0 = multilevel_case[0]
    L = sp.csr_matrix(L0 + 1e-5 * sp.identity(L0.shape[0], format="csr"))
    L.sort_indices()
    ours = _amg_setup.lean_hierarchy(L)
    theirs = smoothed_aggregation_solver(L, **_amg_setup.LEAN_OPTIONS)
    assert ours.levels[0].A is L and len(ours.levels) > 2
    assert abs(sp.csr_matrix(ours.levels[0].P) - sp.csr_matrix(theirs.levels[0].P)).max() <= 1e-13
    np.testing.assert_allclose(ours.levels[1].B, theirs.levels[1].B, atol=1e-13)
    A1, B1 = sp.csr_matrix(ours.levels[1].A), sp.csr_matrix(theirs.levels[1].A)
    assert A1.nnz == B1.nnz and abs(A1 - B1).max() <= 1e-13
    lean = eigensolve(L0, 4, solver="lobpcg", random_state=0)
    monkeypatch.setattr(lobpcg, "lean_hierarchy", lambda M: smoothed_aggregation_solver(M, **_amg_setup.LEAN_OPTIONS))
    pyamg_only = eigensolve(L0, 4, solver="lobpcg", random_state=0)
    assert lean.converged and pyamg_only.converged and abs(lean.n_iter - pyamg_only.n_iter) <= 1
    np.testing.assert_allclose(lean.values, pyamg_only.values, rtol=1e-6, atol=1e-9)
    assert max_angle(lean.vectors, pyamg_only.vectors) < 1e-3


def test_assume_symmetric_skips_only_the_symmetry_check():
    """``assume_symmetric=True`` (a Laplacian symmetric by construction): the same eigenpairs as the checked call;
    an asymmetric matrix is refused by default; NaN is refused either way; a non-bool is a parameter error."""
    from eigenflow.spectral.errors import InputDataError

    A = sp.random(300, 300, density=0.05, random_state=0, format="csr")
    A = (A + A.T + sp.identity(300) * 5).tocsr()
    checked = eigensolve(A, 3, solver="dense")
    trusted = eigensolve(A, 3, solver="dense", assume_symmetric=True)
    np.testing.assert_array_equal(checked.values, trusted.values)
    skew = (A + sp.csr_matrix(([1.0], ([0], [1])), shape=A.shape)).tocsr()
    with pytest.raises(InputDataError, match="symmetric"):
        eigensolve(skew, 3, solver="dense")
    bad = A.copy()
    bad.data[0] = np.nan
    with pytest.raises(InputDataError, match="NaN"):
        eigensolve(bad, 3, solver="dense", assume_symmetric=True)
    with pytest.raises(ParameterError, match="assume_symmetric"):
        eigensolve(A, 3, assume_symmetric="yes")
