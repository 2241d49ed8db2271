"""Laplacian eigenmaps (Belkin & Niyogi) with the Nystrom out-of-sample extension (Bengio et al. 2004).

Three layers, so that the flows can run each stage on stored arrays:

- :func:`laplacian_eigenmaps_from_graph` (W -> embedding, eigenvalues, info): the eigenproblem.
- :class:`~spectral.embedding.out_of_sample.LaplacianEigenmapsModel` (its own module): the out-of-sample map, storable
  without pickle (``to_state`` / ``from_state``, the model_state protocol of ARCHITECTURE.md), applied chunk by
  chunk with ``.transform``.
- :class:`LaplacianEigenmaps`: the scikit-learn estimator that chains kNN graph, weights, eigenproblem and
  model.

Convention (scikit-learn's ``spectral_embedding``, ``norm_laplacian=True``): with ``L_sym u_j = lambda_j u_j``
(unit ``u_j``, ``lambda_0 = 0 <= lambda_1 <= ...``), the embedding is ``f_j = D^-1/2 u_j`` for j = 1..k (the
trivial ``j = 0`` dropped), each column sign-fixed after the division (largest-|.| entry positive).
``normalization="random_walk"`` gives the same ``f_j``: they are the D-orthonormal eigenvectors of
``L_rw = I - D^-1 W``. ``"unnormalized"``: ``f_j`` = unit eigenvectors of ``L = D - W``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from eigenflow.spectral._transformer import EmbeddingTransformerMixin
from eigenflow.spectral._validation import (check_choice, check_fitted_X, check_int, check_random_state, check_state_kind,
                                  clip_int, validate_X)
from eigenflow.spectral.eigen import MATRIX_SOLVERS, SOLVERS, eigensolve, sign_flip
from eigenflow.spectral.embedding.out_of_sample import STATE_VERSION, LaplacianEigenmapsModel
from eigenflow.spectral.errors import DisconnectedGraphError, InputDataError, ParameterError
from eigenflow.spectral.graph.laplacian import NORMALIZATIONS, _components, _laplacian, check_affinity
from eigenflow.spectral.graph.weights import SYMMETRIZATIONS, WEIGHTINGS, fit_weight_params
from eigenflow.spectral.graph.weights import weights_from_params
from eigenflow.spectral.neighbours.index import METHODS as KNN_METHODS
from eigenflow.spectral.neighbours.index import KNNIndex

#: eigen_solver choices of the estimator: every solver of spectral.eigen (the registry, not a copy)
EIGEN_SOLVERS = SOLVERS
ON_DISCONNECTED = ("raise", "per_component")
#: "knn": the sparse kNN graph (spectral.graph.weights); "rbf": the fully connected heat kernel, Nystrom-solved
AFFINITIES = ("knn", "rbf")
#: the solvers of each affinity: a graph takes any matrix solver, the fully connected kernel only Nystrom
AFFINITY_SOLVERS = {"knn": MATRIX_SOLVERS, "rbf": ("auto", "nystrom")}
ESTIMATOR_STATE_KIND = "LaplacianEigenmaps"

#: In "per_component" mode, components of at most this many nodes are solved densely whatever
#: ``eigen_solver`` is (iterative solvers need n >> k); the solver of each component is in ``info``.
SMALL_COMPONENT_DENSE_MAX = 200


def laplacian_eigenmaps_from_graph(
    W: Any,
    n_components: int,
    *,
    normalization: str = "symmetric",
    eigen_solver: str = "auto",
    on_disconnected: str = "raise",
    tol: float | None = None,
    random_state: Any = None,
    initial: Any = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Laplacian eigenmap of a weighted graph.

    Parameters
    ----------
    W : sparse matrix or array, shape (n, n)
        Symmetric non-negative affinity (e.g. :func:`spectral.graph.weights.knn_weights`).
    n_components : int in [1, n - 2]
        Embedding dimension k (eigenpairs 1..k; the trivial pair 0 is dropped).
    normalization : {"symmetric", "random_walk", "unnormalized"}
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "randomized"}
        Passed to :func:`spectral.eigen.eigensolve` ("auto" picks by size; see ``info["eigen_solver"]``).
        "nystrom" needs the data, not a graph: only :class:`LaplacianEigenmaps` accepts it.
    on_disconnected : {"raise", "per_component"}
        "raise": :class:`DisconnectedGraphError` with the component sizes. "per_component": each component
        is embedded on its own (its own k nontrivial eigenvectors); components with at most k + 1 nodes get
        their available eigenvectors and zeros for the rest, isolated nodes get zeros. Each component is then
        translated by its offset (:func:`component_offsets`: component c at ``c * spacing`` on the first axis),
        so that different components never coincide while each keeps its own eigenmap.
    tol : float or None
        Eigensolver tolerance (None: the solver's default).
    random_state : None, int, Generator
    initial : array (n, j <= k) or None
        A warm start: coordinates of the same nodes in an earlier embedding of a nearly equal graph (any rotation and
        scale), e.g. the previous fit's rows and the rows mapped since. They become the eigensolver's start vectors
        (``D^1/2`` times them for the normalized Laplacians, after the trivial vector); used by the solvers that
        iterate on a start block, for a connected graph (``info["n_iter"]`` tells what it saved).

    Returns
    -------
    embedding : ndarray, shape (n, k)
    eigenvalues : ndarray, shape (k,)
        ``lambda_1..lambda_k`` of the Laplacian (of the largest component in "per_component" mode).
    info : dict
        ``eigen_solver`` (what ran on the largest component), ``component_labels`` (n,),
        ``component_eigenvalues`` (C, k), ``component_offsets`` (C, k), ``component_solvers``, ``degrees`` (n,),
        ``residuals`` (k,), ``converged``, ``n_iter``, ``start_vectors`` (with ``initial``: ``"used"``, or why
        not).
    """
    W = check_affinity(W)
    n = W.shape[0]
    k = check_int("n_components", n_components, low=1, high=max(1, n - 2))
    normalization = check_choice("normalization", normalization, NORMALIZATIONS)
    eigen_solver = check_choice("eigen_solver", eigen_solver, MATRIX_SOLVERS)
    on_disconnected = check_choice("on_disconnected", on_disconnected, ON_DISCONNECTED)
    rng = check_random_state(random_state)
    n_comp, labels = _components(W)
    if n_comp > 1 and on_disconnected == "raise":
        sizes = ", ".join(str(s) for s in np.bincount(labels)[:10]) + (", ..." if n_comp > 10 else "")
        raise DisconnectedGraphError(
            f"the graph has {n_comp} connected components (sizes {sizes}); Laplacian eigenmaps of a "
            "disconnected graph mixes the components' indicator vectors. Use on_disconnected='per_component' "
            "(CLI: -p on_disconnected=per_component), more n_neighbors or symmetrize='or'"
        )
    degrees = np.asarray(W.sum(axis=1)).ravel()
    embedding = np.zeros((n, k))
    comp_values = np.zeros((n_comp, k))
    solvers, first = [], None
    groups = np.split(np.argsort(labels, kind="stable"), np.cumsum(np.bincount(labels))[:-1])
    for c, nodes in enumerate(groups):
        solver = eigen_solver if (n_comp == 1 or nodes.size > SMALL_COMPONENT_DENSE_MAX) else "dense"
        if n_comp == 1:  # one component: no (n, n) reindexing copy, and W is not needed after its Laplacian
            L, comp_degrees = _component_laplacian(W, normalization)
            del W  # freed here, not kept for the solve, unless the caller holds it (the flow does not)
        else:
            L, comp_degrees = _component_laplacian(W[nodes][:, nodes], normalization)
        start = None if initial is None or n_comp > 1 else _start_vectors(initial, comp_degrees, k, normalization)
        emb, vals, res = _embed_component(L, comp_degrees, k, normalization, solver, tol, rng, start)
        del L
        embedding[nodes, : emb.shape[1]] = emb
        comp_values[c, : vals.shape[0]] = vals
        solvers.append(res.solver if res is not None else "none")
        first = res if c == 0 else first
    offsets = component_offsets(embedding, n_comp)
    if n_comp > 1:
        embedding += offsets[labels]
    info = {
        "eigen_solver": solvers[0],
        "component_labels": labels,
        "component_eigenvalues": comp_values,
        "component_offsets": offsets,
        "component_solvers": solvers,
        "degrees": degrees,
        "residuals": None if first is None else first.residuals[1:],
        "converged": bool(first is None or first.converged),
        "n_iter": 0 if first is None else int(first.n_iter),
        "start_vectors": None if initial is None else "unused (disconnected graph)" if n_comp > 1 else
        None if first is None else first.info.get("X0"),
    }
    return embedding, comp_values[0].copy(), info


#: Distance between consecutive components' offsets in "per_component" mode, in units of the largest
#: coordinate magnitude R of the component eigenmaps: every component lies in [-R, R] on the first axis
#: around its offset, so a spacing of 4 R leaves a gap of at least 2 R between them.
COMPONENT_SPACING = 4.0


def component_offsets(embedding: np.ndarray, n_comp: int) -> np.ndarray:
    """Offsets (C, k) of the components of a "per_component" embedding (n, k): ``c * spacing * e_1``.

    ``spacing = COMPONENT_SPACING * max |embedding|`` (1 when every row is 0, e.g. only isolated nodes).
    Component 0 (the largest, :func:`spectral.graph.laplacian.connected_components` order) stays at the
    origin; a single component gets a zero offset. Scikit-learn's ``SpectralEmbedding`` separates the
    components through the indicator vectors of the multiple eigenvalue 0 instead, mixed in an arbitrary
    basis and without each component's own eigenmap.
    """
    offsets = np.zeros((n_comp, embedding.shape[1]))
    if n_comp > 1:
        top = float(np.abs(embedding).max()) if embedding.size else 0.0
        offsets[:, 0] = np.arange(n_comp) * COMPONENT_SPACING * (top if top > 0 else 1.0)
    return offsets


def _component_laplacian(Wc: sp.csr_matrix, normalization: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """The Laplacian solved for one component (L_sym for both normalized forms, module docstring) and its degrees."""
    return _laplacian(Wc, "symmetric" if normalization != "unnormalized" else "unnormalized")


def _start_vectors(initial: Any, degrees: np.ndarray, k: int, normalization: str) -> np.ndarray:
    """The eigensolver's start block (n, 1 + j) for ``initial`` (n, j <= k): the trivial eigenvector, then the
    coordinates as eigenvectors of the solved Laplacian (times ``D^1/2`` for the normalized ones)."""
    initial = np.asarray(initial, dtype=np.float64)
    n = degrees.shape[0]
    if initial.ndim != 2 or initial.shape[0] != n or not 1 <= initial.shape[1] <= k or \
            not np.all(np.isfinite(initial)):
        raise InputDataError(f"initial must be finite coordinates (n, j) with n = {n} nodes and 1 <= j <= {k}; got "
                             f"shape {initial.shape}")
    scale = np.sqrt(degrees) if normalization != "unnormalized" else np.ones(n)
    return np.column_stack([scale, initial * scale[:, None]])


def _embed_component(L: sp.csr_matrix, degrees: np.ndarray, k: int, normalization: str, solver: str, tol, rng,
                     start: np.ndarray | None = None):
    """Embedding (n_c, <=k) and eigenvalues of one connected component from its Laplacian (module docstring);
    ``start``: the eigensolver's start vectors (a warm start)."""
    n_c = L.shape[0]
    if n_c == 1:
        return np.zeros((1, 0)), np.zeros(0), None
    sym = normalization != "unnormalized"
    m = min(k + 1, n_c)
    # L is symmetric by construction: the symmetry of W was checked (check_affinity in laplacian_eigenmaps_from_graph)
    res = eigensolve(L, m, which="smallest", solver=solver, tol=tol, random_state=rng, assume_symmetric=True, X0=start)
    vectors = res.vectors / np.sqrt(degrees)[:, None] if sym else res.vectors
    vectors = sign_flip(vectors)
    return vectors[:, 1:], res.values[1:], res


class LaplacianEigenmaps(EmbeddingTransformerMixin, BaseEstimator):
    """Laplacian eigenmaps with a kNN graph and a Nystrom out-of-sample ``transform``.

    Parameters
    ----------
    n_components : int, default 2
        Embedding dimension k, in [1, n_samples - 2].
    n_neighbors : int, default 15
        Graph neighbours per point, in [1, n_samples - 1].
    weighting : {"local_scaling", "heat", "binary", "hein_maier"}
        Edge weights (:mod:`spectral.graph.weights`).
    normalization : {"symmetric", "random_walk", "unnormalized"}
        Laplacian (:mod:`spectral.graph.laplacian`); "symmetric" and "random_walk" give the same embedding.
    affinity : {"knn", "rbf"}, default "knn"
        As scikit-learn's ``SpectralEmbedding``: "knn" is the kNN graph with ``weighting`` and
        ``symmetrize``; "rbf" is the fully connected heat kernel ``exp(-||x - y||^2 / sigma^2)`` with sigma =
        the mean kNN distance, solved by one-shot Nystrom (:mod:`spectral.embedding.nystrom_eigenmaps`; then
        ``affinity_matrix_`` is None and ``model_`` a ``NystromEigenmapsModel``).
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "randomized", "nystrom"}
        Delegated to :func:`spectral.eigen.eigensolve`; "auto" picks by size, the pick is in
        ``eigen_solver_``. ``affinity="knn"`` takes every solver but "nystrom"; ``affinity="rbf"`` takes
        "auto" or "nystrom" (the only solver of a fully connected kernel that never forms it).
    symmetrize : {"or", "and", "mean"}
    knn_method : {"auto", "exact", "nndescent"}
        :func:`spectral.neighbours.knn.knn_graph`.
    on_disconnected : {"raise", "per_component"}
        See :func:`laplacian_eigenmaps_from_graph`.
    tol : float or None
        Eigensolver tolerance.
    random_state : None, int, Generator
        Seeds NN-descent and the eigensolver's start vectors.

    Attributes
    ----------
    embedding_ : ndarray (n_samples, n_components)
    eigenvalues_ : ndarray (n_components,)
        Laplacian eigenvalues lambda_1..lambda_k (largest component).
    eigen_solver_ : str
        The solver that ran.
    affinity_matrix_ : scipy.sparse.csr_matrix (n_samples, n_samples) or None (eigen_solver="nystrom")
    n_connected_components_ : int
    model_ : LaplacianEigenmapsModel or NystromEigenmapsModel
        The out-of-sample map (storable with ``to_state``).
    n_features_in_ : int

    Notes
    -----
    ``transform`` is the Nystrom extension of :class:`LaplacianEigenmapsModel` (see its docstring for the
    derivation); ``transform(X_train)`` returns ``embedding_`` exactly.
    """

    def __init__(self, n_components=2, *, affinity="knn", n_neighbors=15, weighting="local_scaling",
                 normalization="symmetric", eigen_solver="auto", symmetrize="or", knn_method="auto",
                 on_disconnected="raise", tol=None, random_state=None):
        self.n_components, self.affinity, self.n_neighbors = n_components, affinity, n_neighbors
        self.weighting, self.normalization, self.eigen_solver = weighting, normalization, eigen_solver
        self.symmetrize, self.knn_method, self.on_disconnected = symmetrize, knn_method, on_disconnected
        self.tol, self.random_state = tol, random_state

    def fit(self, X, y=None):
        """Build the graph of ``X`` (n, d) and compute the embedding. ``y`` is ignored."""
        X = validate_X(self, X, min_samples=2)
        n_neighbors, n_components = self._check_params(X.shape[0])
        rng = check_random_state(self.random_state)
        index = KNNIndex.build(X, n_neighbors, method=self.knn_method, random_state=rng)
        idx, dist = index.neighbor_graph(copy=False)
        if self.affinity == "rbf":
            return self._fit_nystrom(X, dist, rng, n_components, index)
        wparams, scales, radii = fit_weight_params(
            dist, weighting=self.weighting, symmetrize=self.symmetrize
        )
        W = weights_from_params(idx, dist, wparams, scales)
        embedding, eigenvalues, info = laplacian_eigenmaps_from_graph(
            W, n_components, normalization=self.normalization, eigen_solver=self.eigen_solver,
            on_disconnected=self.on_disconnected, tol=self.tol, random_state=rng,
        )
        self.model_ = LaplacianEigenmapsModel(
            embedding, info["component_eigenvalues"], info["component_labels"], info["degrees"], scales, radii,
            wparams, self.normalization, index.params, index=index, component_offsets=info["component_offsets"],
        )
        self.embedding_ = embedding
        self.eigenvalues_ = eigenvalues
        self.eigen_solver_ = info["eigen_solver"]
        self.affinity_matrix_ = W
        self.n_connected_components_ = int(info["component_eigenvalues"].shape[0])
        return self

    def _fit_nystrom(self, X, dist, rng, n_components, index):
        """The fully connected heat-kernel variant (see :mod:`spectral.embedding.nystrom_eigenmaps`)."""
        from eigenflow.spectral.embedding.nystrom_eigenmaps import nystrom_eigenmaps

        sigma = fit_weight_params(dist, weighting="heat")[0].sigma  # mean kNN distance
        embedding, eigenvalues, model, info = nystrom_eigenmaps(
            X, n_components, sigma, tol=self.tol, random_state=rng, index=index
        )
        self.model_ = model
        self.embedding_, self.eigenvalues_ = embedding, eigenvalues
        self.eigen_solver_ = info["eigen_solver"]
        self.affinity_matrix_ = None  # fully connected kernel, never formed
        self.n_connected_components_ = 1
        return self

    def fit_transform(self, X, y=None):
        """Fit and return ``embedding_`` (n, n_components)."""
        return self.fit(X, y).embedding_

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)`` of the fitted estimator (the model_state protocol; no pickle).

        Arrays: ``embedding``, ``eigenvalues``, the model's arrays under ``model/`` and, for the kNN
        affinity, the training points ``X_fit`` from which :meth:`from_state` rebuilds the kNN index once
        (:meth:`spectral.neighbours.index.KNNIndex.rebuild`, the same index). Attrs: parameters (a Generator
        ``random_state`` is stored as None: the fitted state does not need it) and the model's attrs.
        """
        check_is_fitted(self, "model_")
        m_arrays, m_attrs = self.model_.to_state()
        arrays = {"embedding": self.embedding_, "eigenvalues": self.eigenvalues_,
                  **{f"model/{k}": v for k, v in m_arrays.items()}}
        arrays["X_fit"] = self.model_.index.training_points
        params = self.get_params()
        if not (params["random_state"] is None or isinstance(params["random_state"], int)):
            params["random_state"] = None
        attrs = {"kind": ESTIMATOR_STATE_KIND, "version": STATE_VERSION, "params": params, "model": m_attrs,
                 "eigen_solver_": self.eigen_solver_, "n_connected_components": self.n_connected_components_,
                 "n_features_in": int(self.n_features_in_)}
        return {k: np.asarray(v) for k, v in arrays.items()}, attrs

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> LaplacianEigenmaps:
        """Inverse of :meth:`to_state`: ``transform`` gives bit-identical results (``affinity_matrix_`` is None)."""
        from eigenflow.spectral.embedding.nystrom_eigenmaps import NystromEigenmapsModel

        check_state_kind(attrs, ESTIMATOR_STATE_KIND, STATE_VERSION, "estimator state")
        est = cls(**attrs["params"])
        m_arrays = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("model/")}
        if est.affinity == "knn":
            est.model_ = LaplacianEigenmapsModel.from_state(m_arrays, attrs["model"])
            est.model_.rebuild_index(arrays["X_fit"])
        else:
            est.model_ = NystromEigenmapsModel.from_state(m_arrays, attrs["model"])
            est.model_.rebuild_index(arrays["X_fit"])
        est.embedding_, est.eigenvalues_ = np.asarray(arrays["embedding"]), np.asarray(arrays["eigenvalues"])
        est.eigen_solver_, est.affinity_matrix_ = attrs["eigen_solver_"], None
        est.n_connected_components_ = int(attrs["n_connected_components"])
        est.n_features_in_ = int(attrs["n_features_in"])
        return est

    def transform(self, X):
        """Nystrom out-of-sample embedding of ``X`` (m, d) -> (m, n_components)."""
        X = check_fitted_X(self, X, "model_")
        return self.model_.transform(X)

    def _check_params(self, n: int) -> tuple[int, int]:
        """Check the parameters; return ``(n_neighbors, n_components)`` clipped to the n samples (with a warning)."""
        n_neighbors = clip_int("n_neighbors", self.n_neighbors, n - 1)
        n_components = clip_int("n_components", self.n_components, max(1, n - 2), bound="n_samples - 2")
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        affinity = check_choice("affinity", self.affinity, AFFINITIES)
        check_choice("eigen_solver", self.eigen_solver, EIGEN_SOLVERS)
        if self.eigen_solver not in AFFINITY_SOLVERS[affinity]:
            raise ParameterError(
                f"eigen_solver={self.eigen_solver!r} does not apply to affinity={affinity!r}: affinity='knn' takes "
                f"eigen_solver in {list(AFFINITY_SOLVERS['knn'])}, affinity='rbf' takes eigen_solver in "
                f"{list(AFFINITY_SOLVERS['rbf'])} (the Nystrom solver needs the fully connected kernel)"
            )
        if affinity == "rbf" and self.normalization == "unnormalized":
            raise ParameterError(
                "affinity='rbf' (Nystrom) solves the normalized affinity: normalization must be 'symmetric' or "
                "'random_walk'; got 'unnormalized'"
            )
        check_choice("symmetrize", self.symmetrize, SYMMETRIZATIONS)
        check_choice("knn_method", self.knn_method, KNN_METHODS)
        check_choice("on_disconnected", self.on_disconnected, ON_DISCONNECTED)
        return n_neighbors, n_components
