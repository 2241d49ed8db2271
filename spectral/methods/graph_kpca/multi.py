"""Multi-kernel, multi-graph and multi-modal GRAD kernel PCA (STG18 eq. 15-21), dense.

Objective (eq. 16 and 19, with Lambda_d = I and Psi^T = V, V^T V = I):

    J(V, theta, beta) = -tr(V^T (sum_q theta_q K_c^(q)) V) - gamma tr(V^T (sum_l beta_l R_l) V)
                        + lambda_theta ||theta||^2 + lambda_beta ||beta||^2,   theta, beta >= 0,

with R_l = r^dagger(L^l) (a graph kernel, eq. 19) or R_l = -L^l (the Laplacian regularizers of eq. 18 and
eq. 21). Alternating minimization: the eigen-step (V = d leading eigenvectors of the combined matrix,
the exact minimizer for fixed weights) and the closed-form weight steps (eq. 17 and 20)

    theta_q = max(0, tr(V^T K_c^(q) V)) / (2 lambda_theta),  beta_l = max(0, gamma tr(V^T R_l V)) / (2 lambda_beta),

each an exact block minimizer, so J never increases. With R_l = -L^l the trace is <= 0 and the learned
beta would be 0: learning beta therefore needs a graph kernel; with Laplacians beta is fixed (eq. 18, 21).

Multi-modal data (eq. 21): ``modes`` lists feature groups (column indices, metric), one kNN graph per mode
with its own metric (e.g. "hamming" for binary features); the kernels act on all features.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from eigenflow.spectral._transformer import EmbeddingTransformerMixin
from eigenflow.spectral._validation import (check_choice, check_fitted_X, check_float, check_int, check_random_state, clip_int,
                                  validate_X)
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.graph.laplacian import laplacian
from eigenflow.spectral.methods.estimator_state import StateMixin
from eigenflow.spectral.methods.graph_kpca import graphs as G
from eigenflow.spectral.methods.graph_kpca import multi_nystrom as S
from eigenflow.spectral.methods.graph_kpca._core import top_eigs_dense, training_index, training_matches
from eigenflow.spectral.methods.graph_kpca.graph_kernels import dense_graph_kernel, graph_kernel_params
from eigenflow.spectral.operators.kernels import center_gram, center_rows, kernel_from_params


class MultiGraphKPCA(StateMixin, EmbeddingTransformerMixin, BaseEstimator):
    """GRAD multi-kernel / multi-graph kernel PCA with learned theta_ and beta_ (eq. 15-21).

    Parameters
    ----------
    n_components : int
    kernels : sequence of (name, params) pairs, e.g. (("rbf", {"gamma": 0.1}), ("linear", None)).
    graphs : sequence of (n, n) symmetric adjacencies (a multi-layer graph), or None.
    modes : sequence of (columns, metric) feature groups, one kNN graph each (eq. 21), or None. With
        ``gamma > 0`` and neither graphs nor modes, one kNN graph over all the features is used.
    n_neighbors, graph_weight : the per-mode kNN graphs ("gaussian" | "binary" | "cosine").
    laplacian : "unnormalized" | "symmetric".
    graph_kernel : None (R_l = -L^l) or a graph kernel name of :mod:`spectral.methods.graph_kpca.graph_kernels`.
    gamma : float >= 0, weight of the graph term.
    learn_theta, learn_beta : bool; fixed weights stay at 1 (every term contributes equally, eq. 18).
    lambda_theta, lambda_beta : float > 0, the l2 penalties of eq. 16 and 19.
    max_iter : int; tol : relative decrease of J below which the alternation stops.
    n_landmarks : None (dense path, n x n Gram matrices) or int >= 1: the implicit path at scale
        (:mod:`spectral.methods.graph_kpca.multi_nystrom`): Nystrom features Phi_q (n, r_q) per kernel, R_l = -L^l
        sparse or the low-rank graph kernel from the ``n_graph_eigs`` smallest eigenpairs of L^l; no n x n array.
    nystrom_rank : None or int, keep the r leading eigenpairs of each K_ZZ (as in GraphKPCA).
    n_graph_eigs : int, eigenpairs of each L^l for a graph kernel at scale.
    eigen_solver : "arpack" | "lobpcg" | "randomized", :func:`spectral.eigen.eigensolve` on the implicit
        operator; eigen_tol : its absolute residual tolerance (None: its default).
    random_state : seed of the landmarks and start vectors (implicit path).

    Attributes
    ----------
    theta_ (Q,), beta_ (L,), objective_ (list, J after each full iteration), objective_trace_ (J after
    every block step), n_iter_, embedding_ (n, d), eigenvalues_ (d,); implicit path: nystrom_ (list of
    NystromFeatures), eigen_info_ (last eigensolve).
    """

    def __init__(self, n_components=2, *, kernels=(("rbf", None),), graphs=None, modes=None,
                 n_neighbors=10, graph_weight="gaussian", laplacian="symmetric", graph_kernel="regularized",
                 graph_kernel_params=None, gamma=1.0, learn_theta=True, learn_beta=True, lambda_theta=1.0,
                 lambda_beta=1.0, max_iter=50, tol=1e-8, n_landmarks=None, nystrom_rank=None, n_graph_eigs=50,
                 eigen_solver="arpack", eigen_tol=None, random_state=None):
        self.n_components, self.kernels, self.graphs, self.modes = n_components, kernels, graphs, modes
        self.n_neighbors, self.graph_weight, self.laplacian = n_neighbors, graph_weight, laplacian
        self.graph_kernel, self.graph_kernel_params, self.gamma = graph_kernel, graph_kernel_params, gamma
        self.learn_theta, self.learn_beta, self.lambda_theta = learn_theta, learn_beta, lambda_theta
        self.lambda_beta, self.max_iter, self.tol, self.n_landmarks = lambda_beta, max_iter, tol, n_landmarks
        self.nystrom_rank, self.n_graph_eigs, self.eigen_solver = nystrom_rank, n_graph_eigs, eigen_solver
        self.eigen_tol, self.random_state = eigen_tol, random_state

    def fit(self, X, y=None):
        X = validate_X(self, X, min_samples=3)
        n = X.shape[0]
        d = clip_int("n_components", self.n_components, n - 2, bound="n_samples - 2")
        gamma = check_float("gamma", self.gamma, low=0.0)
        lt = check_float("lambda_theta", self.lambda_theta, low=0.0, low_inclusive=False)
        lb = check_float("lambda_beta", self.lambda_beta, low=0.0, low_inclusive=False)
        max_iter = check_int("max_iter", self.max_iter, low=1)
        tol = check_float("tol", self.tol, low=0.0)
        self._kparams = self._check_kernels()
        if self.learn_beta and self.graph_kernel is None:
            raise ParameterError("learn_beta=True needs a graph_kernel (eq. 19-20 weight r^dagger(L^l)); "
                                 "with Laplacian regularizers (graph_kernel=None) set learn_beta=False")
        step, ktr, gtr, finish = (self._dense_problem(X, n, d) if self.n_landmarks is None
                                  else self._implicit_problem(X, n, d, gamma))
        Q, nL = len(self._kparams), len(self.graphs_)
        theta = np.full(Q, 1.0 / Q) if self.learn_theta else np.ones(Q)
        beta = np.full(nL, 1.0 / max(nL, 1)) if self.learn_beta else np.ones(nL)

        def objective(V, th, be):
            tk, tr = ktr(V), gtr(V)
            return float(-th @ tk - gamma * (be @ tr) + lt * th @ th + lb * be @ be), tk, tr

        trace, per_iter = [], []
        for it in range(max_iter):
            lam, V = step(theta, beta, gamma)  # eigen-step (eq. 14 with the combined matrices)
            J, tk, tr = objective(V, theta, beta)
            trace.append(J)
            if self.learn_theta:  # eq. 17
                theta = np.maximum(tk, 0.0) / (2.0 * lt)
                trace.append(objective(V, theta, beta)[0])
            if self.learn_beta and nL:  # eq. 20
                beta = np.maximum(gamma * tr, 0.0) / (2.0 * lb)
                trace.append(objective(V, theta, beta)[0])
            per_iter.append(trace[-1])
            if it > 0 and abs(per_iter[-2] - per_iter[-1]) <= tol * max(1.0, abs(per_iter[-2])):
                break
        if not np.any(theta > 0):
            raise InputDataError("every kernel weight theta_q became 0: all kernels are degenerate on X")
        lam, V = step(theta, beta, gamma)
        finish(V)
        self.theta_, self.beta_, self.n_iter_ = theta, beta, it + 1
        self.objective_, self.objective_trace_ = per_iter, trace
        self.X_fit_ = X.copy()
        self.knn_index_ = training_index(X)  # matches of transform's points with training points
        self.eigenvalues_, self.eigenvectors_, self.embedding_ = lam, V, V
        return self

    def _dense_problem(self, X, n, d):
        """(eigen-step, kernel traces, graph traces, finish) on the dense n x n matrices."""
        Ks = [center_gram(kernel_from_params(k, p, name=f"kernels[{q}] params")(X, X))
              for q, (k, p) in enumerate(self._kparams)]
        Rs = self._graph_matrices(X, n)
        Kc = [k[0] for k in Ks]
        self._centering = [(k[1], k[2]) for k in Ks]

        def step(theta, beta, gamma):
            M = sum(t * K for t, K in zip(theta, Kc)) + gamma * sum(b * R for b, R in zip(beta, Rs))
            return top_eigs_dense(M, d)

        return (step, lambda V: np.array([np.trace(V.T @ K @ V) for K in Kc]),
                lambda V: np.array([np.trace(V.T @ R @ V) for R in Rs]), lambda V: None)

    def _implicit_problem(self, X, n, d, gamma):
        """(eigen-step, kernel traces, graph traces, finish) on the implicit operator (no n x n array)."""
        solver = check_choice("eigen_solver", self.eigen_solver, S.EIGEN_SOLVERS)
        etol = None if self.eigen_tol is None else check_float("eigen_tol", self.eigen_tol, low=0.0,
                                                                 low_inclusive=False)
        rng = check_random_state(self.random_state)
        seed = lambda: int(rng.integers(0, 2**31 - 1))  # noqa: E731
        fits = [S.fit_kernel_features(X, k, p, self.n_landmarks, self.nystrom_rank, seed(), f"kernels[{q}]")
                for q, (k, p) in enumerate(self._kparams)]
        self.nystrom_ = [f[0] for f in fits]
        Phis, self._phi_means = [f[1] for f in fits], [f[2] for f in fits]
        terms = self._graph_terms(X, n, seed)

        def step(theta, beta, gamma):
            lam, V, self.eigen_info_ = S.implicit_top_eigs(Phis, theta, terms, beta, gamma, d, solver=solver,
                                                           tol=etol, seed=seed())
            return lam, V

        def finish(V):
            self._PtV = [P.T @ V for P in Phis]  # (r_q, d): k_c^(q)(x)^T V = (phi_q(x) - mean_q) @ PtV_q

        return (step, lambda V: S.kernel_traces(Phis, V), lambda V: np.array([t.trace(V) for t in terms]),
                finish)

    def fit_transform(self, X, y=None):
        return self.fit(X, y).embedding_

    def transform(self, X):
        """Kernel PCA projection with the learned kernel, sum_q theta_q k_c^(q)(x)^T V / lambda.

        New points carry no row of the prior graphs (isolated nodes); points equal to a training point get
        its training row, so transform(X_train) reproduces the fit.
        """
        X = check_fitted_X(self, X, "embedding_")
        num = np.zeros((X.shape[0], self.eigenvectors_.shape[1]))
        for q, (t, (k, p)) in enumerate(zip(self.theta_, self._kparams)):
            if t <= 0:
                continue
            if self.n_landmarks is None:
                col, tot = self._centering[q]
                K_new = kernel_from_params(k, p, name=f"kernels[{q}] params")(X, self.X_fit_)
                num += t * center_rows(K_new, col, tot) @ self.eigenvectors_
            else:
                num += t * (self.nystrom_[q].transform(X) - self._phi_means[q]) @ self._PtV[q]
        Z = num / self.eigenvalues_
        match = training_matches(self.knn_index_, X)
        Z[match >= 0] = self.embedding_[match[match >= 0]]
        return Z

    def _check_kernels(self):
        ks = list(self.kernels) if self.kernels is not None else []
        if not ks:
            raise ParameterError(f"kernels must be a non-empty list of (name, params) pairs; got {self.kernels!r}")
        out = []
        for q, kp in enumerate(ks):
            if not (isinstance(kp, (list, tuple)) and len(kp) == 2):
                raise ParameterError(f"kernels[{q}] must be a (name, params) pair; got {kp!r}")
            out.append((kp[0], kp[1]))
        return out

    def _adjacencies(self, X, n):
        check_choice("laplacian", self.laplacian, G.LAPLACIANS)
        adj = [G.check_user_graph(A, n, f"graphs[{i}]") for i, A in enumerate(self.graphs or [])]
        if self.modes is not None:
            k = clip_int("n_neighbors", self.n_neighbors, n - 1)
            for cols, metric in G.check_modes(self.modes, X.shape[1]):
                adj.append(G.data_graph(X[:, cols], k, weight=self.graph_weight, metric=metric))
        elif not adj and self.gamma > 0:
            # no graph given: one kNN data graph over all the features (the single mode of eq. 21)
            adj.append(G.data_graph(X, clip_int("n_neighbors", self.n_neighbors, n - 1), weight=self.graph_weight))
        self.graphs_ = adj
        return adj

    def _graph_terms(self, X, n, seed):
        """R_l as :class:`spectral.methods.graph_kpca.multi_nystrom.GraphTerm` (sparse -L or low-rank graph kernel)."""
        adj = self._adjacencies(X, n)
        gk = graph_kernel_params(self.graph_kernel, self.graph_kernel_params) if self.graph_kernel else None
        return [S.GraphTerm(laplacian(A, self.laplacian)[0], self.graph_kernel, gk, self.n_graph_eigs,
                            seed()) for A in adj]

    def _graph_matrices(self, X, n):
        adj = self._adjacencies(X, n)
        gk = graph_kernel_params(self.graph_kernel, self.graph_kernel_params) if self.graph_kernel else None
        Rs = []
        for A in adj:
            L, _ = laplacian(A, self.laplacian)
            Rs.append(dense_graph_kernel(L, self.graph_kernel, gk) if gk is not None else -L.toarray())
        return Rs
