"""Multi-kernel, multi-graph and multi-modal GRAD kernel PCA (paper 003 eq. 15-21), dense.

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
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_choice, check_float, check_int
from ..errors import InputDataError, ParameterError
from . import graphs as G
from ._core import center_gram, center_rows, kernel_matrix, top_eigs_dense, training_matches
from .graph_kernels import dense_graph_kernel, graph_kernel_params


class MultiGraphKPCA(TransformerMixin, BaseEstimator):
    """GRAD multi-kernel / multi-graph kernel PCA with learned theta_ and beta_ (eq. 15-21).

    Parameters
    ----------
    n_components : int
    kernels : sequence of (name, params) pairs, e.g. (("rbf", {"gamma": 0.1}), ("linear", None)).
    graphs : sequence of (n, n) symmetric adjacencies (a multi-layer graph), or None.
    modes : sequence of (columns, metric) feature groups, one kNN graph each (eq. 21), or None.
    n_neighbors, graph_weight : the per-mode kNN graphs ("gaussian" | "binary" | "cosine").
    laplacian : "unnormalized" | "symmetric".
    graph_kernel : None (R_l = -L^l) or a graph kernel name of :mod:`spectral.grad.graph_kernels`.
    gamma : float >= 0, weight of the graph term.
    learn_theta, learn_beta : bool; fixed weights stay at 1 (every term contributes equally, eq. 18).
    lambda_theta, lambda_beta : float > 0, the l2 penalties of eq. 16 and 19.
    max_iter : int; tol : relative decrease of J below which the alternation stops.

    Attributes
    ----------
    theta_ (Q,), beta_ (L,), objective_ (list, J after each full iteration), objective_trace_ (J after
    every block step), n_iter_, embedding_ (n, d), eigenvalues_ (d,).
    """

    def __init__(self, n_components=2, *, kernels=(("rbf", None),), graphs=None, modes=None,
                 n_neighbors=10, graph_weight="gaussian", laplacian="symmetric", graph_kernel="regularized",
                 graph_kernel_params=None, gamma=1.0, learn_theta=True, learn_beta=True, lambda_theta=1.0,
                 lambda_beta=1.0, max_iter=50, tol=1e-8):
        self.n_components = n_components
        self.kernels = kernels
        self.graphs = graphs
        self.modes = modes
        self.n_neighbors = n_neighbors
        self.graph_weight = graph_weight
        self.laplacian = laplacian
        self.graph_kernel = graph_kernel
        self.graph_kernel_params = graph_kernel_params
        self.gamma = gamma
        self.learn_theta = learn_theta
        self.learn_beta = learn_beta
        self.lambda_theta = lambda_theta
        self.lambda_beta = lambda_beta
        self.max_iter = max_iter
        self.tol = tol

    def fit(self, X, y=None):
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=3)
        n = X.shape[0]
        d = check_int("n_components", self.n_components, low=1, high=n - 2)
        gamma = check_float("gamma", self.gamma, low=0.0)
        lt = check_float("lambda_theta", self.lambda_theta, low=0.0, low_inclusive=False)
        lb = check_float("lambda_beta", self.lambda_beta, low=0.0, low_inclusive=False)
        max_iter = check_int("max_iter", self.max_iter, low=1)
        tol = check_float("tol", self.tol, low=0.0)
        self._kparams = self._check_kernels()
        Ks = [center_gram(kernel_matrix(X, X, k, p)) for k, p in self._kparams]
        Rs = self._graph_matrices(X, n)
        if self.learn_beta and self.graph_kernel is None:
            raise ParameterError("learn_beta=True needs a graph_kernel (eq. 19-20 weight r^dagger(L^l)); "
                                 "with Laplacian regularizers (graph_kernel=None) set learn_beta=False")
        theta = np.full(len(Ks), 1.0 / len(Ks)) if self.learn_theta else np.ones(len(Ks))
        beta = np.full(len(Rs), 1.0 / max(len(Rs), 1)) if self.learn_beta else np.ones(len(Rs))
        Kc = [k[0] for k in Ks]

        def objective(V, th, be):
            tk = np.array([np.trace(V.T @ K @ V) for K in Kc])
            tr = np.array([np.trace(V.T @ R @ V) for R in Rs])
            return float(-th @ tk - gamma * (be @ tr) + lt * th @ th + lb * be @ be), tk, tr

        trace, per_iter = [], []
        for it in range(max_iter):
            M = sum(t * K for t, K in zip(theta, Kc)) + gamma * sum(b * R for b, R in zip(beta, Rs))
            lam, V = top_eigs_dense(M, d)  # eigen-step (eq. 14 with the combined matrices)
            J, tk, tr = objective(V, theta, beta)
            trace.append(J)
            if self.learn_theta:  # eq. 17
                theta = np.maximum(tk, 0.0) / (2.0 * lt)
                trace.append(objective(V, theta, beta)[0])
            if self.learn_beta and Rs:  # eq. 20
                beta = np.maximum(gamma * tr, 0.0) / (2.0 * lb)
                trace.append(objective(V, theta, beta)[0])
            per_iter.append(trace[-1])
            if it > 0 and abs(per_iter[-2] - per_iter[-1]) <= tol * max(1.0, abs(per_iter[-2])):
                break
        if not np.any(theta > 0):
            raise InputDataError("every kernel weight theta_q became 0: all kernels are degenerate on X")
        M = sum(t * K for t, K in zip(theta, Kc)) + gamma * sum(b * R for b, R in zip(beta, Rs))
        lam, V = top_eigs_dense(M, d)
        self.theta_, self.beta_, self.n_iter_ = theta, beta, it + 1
        self.objective_, self.objective_trace_ = per_iter, trace
        self._centering = [(k[1], k[2]) for k in Ks]
        self.X_fit_ = X.copy()
        self.eigenvalues_, self.eigenvectors_, self.embedding_ = lam, V, V
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X, y).embedding_

    def transform(self, X):
        """Kernel PCA projection with the learned kernel, sum_q theta_q k_c^(q)(x)^T V / lambda.

        New points carry no row of the prior graphs (isolated nodes); points equal to a training point get
        its training row, so transform(X_train) reproduces the fit.
        """
        check_is_fitted(self, "embedding_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        num = np.zeros((X.shape[0], self.n_components))
        for t, (k, p), (col, tot) in zip(self.theta_, self._kparams, self._centering):
            if t > 0:
                num += t * center_rows(kernel_matrix(X, self.X_fit_, k, p), col, tot) @ self.eigenvectors_
        Z = num / self.eigenvalues_
        match = training_matches(self.X_fit_, X)
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

    def _graph_matrices(self, X, n):
        check_choice("laplacian", self.laplacian, G.LAPLACIANS)
        adj = [G.check_user_graph(A, n, f"graphs[{i}]") for i, A in enumerate(self.graphs or [])]
        if self.modes is not None:
            for cols, metric in G.check_modes(self.modes, X.shape[1]):
                adj.append(G.data_graph(X[:, cols], self.n_neighbors, weight=self.graph_weight, metric=metric))
        if not adj and self.gamma > 0:
            raise ParameterError("gamma > 0 needs at least one graph: give graphs=[...] or modes=[...]")
        gk = graph_kernel_params(self.graph_kernel, self.graph_kernel_params) if self.graph_kernel else None
        Rs = []
        for A in adj:
            L, _ = G.graph_laplacian(A, self.laplacian)
            Rs.append(dense_graph_kernel(L, self.graph_kernel, gk) if gk is not None else -L.toarray())
        self.graphs_ = adj
        return Rs
