"""The method registry: every method the ``embed`` / ``extend`` flows can run, as one entry naming its estimator.

A method's parameters are its estimator's own ``__init__`` parameters with the estimator's defaults (read
with :func:`inspect.signature`, declared nowhere else; ``eigenflow methods`` reads the same signature from the
estimator's source text, :mod:`tasks._declared_params`, so that listing the methods imports no estimator).
An entry adds only what the pipeline needs:

- ``fit``: how to fit it from a store (the name of a strategy of :mod:`tasks.fitting`: the estimator's own
  ``fit`` on the fit rows read into memory, or an at-scale path: kNN graph + sparse eigensolver, chunked
  sums over a Dask array, a labeled subset);
- ``outputs``: the per-point results it writes (``embedding``, for classifiers ``labels`` / ``scores``, for
  clusterers ``labels``),
  computed per chunk of rows by :func:`point_outputs`;
- ``store_params``: ``__init__`` parameters the pipeline fills from the store (must-link / cannot-link pairs),
  which a user cannot set;
- ``needs_labels``: whether a run without labels is refused before any work.

Models are saved with the estimator's ``to_state`` / ``from_state`` (plain arrays + JSON attributes).
This module imports no Prefect (it runs on the Dask workers) and imports ``spectral`` lazily.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eigenflow.spectral.errors import ParameterError
from eigenflow.tasks._declared_params import UnreadableSignature, declared_init_defaults

#: Per-point outputs an entry may write: the embedding (n, k), predicted labels (n,) and class scores (n, c).
EMBEDDING, LABELS, SCORES = "embedding", "labels", "scores"


@dataclass(frozen=True)
class MethodEntry:
    """One method of the pipeline (see the module docstring)."""

    name: str
    estimator: str  # "module:Class"
    summary: str
    needs_labels: bool = False
    fit: str = "in_memory"
    outputs: tuple[str, ...] = (EMBEDDING,)
    store_params: tuple[str, ...] = ()
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def estimator_class(self) -> type:
        module, _, name = self.estimator.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def parameters(self) -> dict[str, Any]:
        """``{name: default}`` of the estimator's ``__init__`` (minus :attr:`store_params`)."""
        sig = inspect.signature(self.estimator_class.__init__)
        return {name: p.default for name, p in sig.parameters.items()
                if name != "self" and p.kind is not p.VAR_KEYWORD and name not in self.store_params}

    @property
    def declared_parameters(self) -> dict[str, Any]:
        """:attr:`parameters` read from the estimator's source text (:mod:`tasks._declared_params`), without
        importing its module (scikit-learn, numba); the live signature when the source cannot be read that way."""
        try:
            defaults = declared_init_defaults(self.estimator)
        except UnreadableSignature:
            return self.parameters
        return {name: value for name, value in defaults.items() if name not in self.store_params}

    def describe(self) -> dict[str, Any]:
        """JSON-able ``{"name", "parameters": {name: default}, "needs_labels", ...}`` (``eigenflow methods``);
        the parameters are :attr:`declared_parameters`, so describing a method imports no estimator."""
        return {"name": self.name, "estimator": self.estimator.replace(":", "."), "summary": self.summary,
                "parameters": {k: _jsonable(v) for k, v in self.declared_parameters.items()},
                "needs_labels": self.needs_labels, "outputs": list(self.outputs)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


_ENTRIES = (
    MethodEntry("laplacian_eigenmaps", "eigenflow.spectral.embedding:LaplacianEigenmaps",
                "Laplacian eigenmaps of a kNN graph, Nystrom out-of-sample (Belkin & Niyogi 2003; Bengio et al. 2004)",
                fit="laplacian_eigenmaps"),
    MethodEntry("dne", "eigenflow.spectral.methods.discriminant:DNE",
                "discriminant neighborhood embedding, (semi-)supervised "
                "(Chatpatanasiri & Kijsirikul 2008)", needs_labels=True, fit="discriminant"),
    MethodEntry("mfa", "eigenflow.spectral.methods.discriminant:MFA",
                "marginal Fisher analysis, (semi-)supervised "
                "(Chatpatanasiri & Kijsirikul 2008)", needs_labels=True, fit="discriminant"),
    MethodEntry("lfda", "eigenflow.spectral.methods.discriminant:LFDA",
                "local Fisher discriminant analysis, (semi-)supervised "
                "(Chatpatanasiri & Kijsirikul 2008)", needs_labels=True, fit="discriminant"),
    MethodEntry("nsse", "eigenflow.spectral.methods.nsse:NSSE",
                "nonlinear supervised smooth embedding with an RBF interpolator "
                "(Ornek & Vural 2019)", needs_labels=True, fit="labeled_subset"),
    MethodEntry("suplap", "eigenflow.spectral.methods.nsse:SupervisedLaplacianEigenmaps",
                "supervised Laplacian eigenmaps with "
                "the RBF interpolator (SUPLAP of Ornek & Vural 2019)", needs_labels=True, fit="labeled_subset"),
    MethodEntry("tsk", "eigenflow.spectral.methods.spectral_kernels:TSK",
                "transductive spectral kernel learned by an LP; labels "
                "and scores of every point (Liu et al. 2009)", needs_labels=True, fit="spectral_kernel",
                outputs=(EMBEDDING, LABELS, SCORES)),
    MethodEntry("rsk", "eigenflow.spectral.methods.spectral_kernels:RSK",
                "regularized spectral kernel (Zhou et al.'s consistency "
                "method as a kernel; Liu et al. 2009)", needs_labels=True, fit="spectral_kernel",
                outputs=(EMBEDDING, LABELS, SCORES)),
    MethodEntry("graph_kpca", "eigenflow.spectral.methods.graph_kpca:GraphKPCA",
                "graph-regularized kernel PCA, optionally "
                "constrained by labels or must/cannot-link pairs (Shen et al. 2018)",
                store_params=("must_link", "cannot_link", "precomputed_knn")),
    MethodEntry("multi_graph_kpca", "eigenflow.spectral.methods.graph_kpca:MultiGraphKPCA",
                "multi-kernel, multi-graph kernel PCA "
                "with learned weights (Shen et al. 2018)"),
    MethodEntry("lneg", "eigenflow.spectral.methods.graph_kpca:LNEG",
                "local nonlinear embedding on graphs (Shen et al. 2018)"),
    MethodEntry("spectral_clustering", "eigenflow.spectral.clustering:SpectralClustering",
                "spectral clustering of the kNN graph's normalized Laplacian eigenmap, cluster labels of every "
                "point (Ng, Jordan & Weiss 2001)", fit="spectral_clustering", outputs=(EMBEDDING, LABELS)),
)
REGISTRY: dict[str, MethodEntry] = {e.name: e for e in _ENTRIES}
#: The method of a run that names none (and of a manifest written before runs recorded theirs).
DEFAULT_METHOD = "laplacian_eigenmaps"


def get_entry(name: str) -> MethodEntry:
    """The entry ``name`` or a :class:`ParameterError` listing the registered methods."""
    if name not in REGISTRY:
        raise ParameterError(f"method must be one of {sorted(REGISTRY)}; got {name!r}")
    return REGISTRY[name]


def check_params(name: str, params: dict | None, *, has_labels: bool | None = None,
                 estimator: bool = True) -> dict[str, Any]:
    """Validate the method parameters of a run before any work; returns the full parameter dict.

    Raises :class:`ParameterError` for an unknown parameter (naming it and listing the accepted ones, and the
    methods that do have it), a store-supplied parameter, a value the estimator refuses (with ``estimator``:
    :func:`check_estimator_params`, which imports the estimator's numerical packages), or a method that needs
    labels run without them (``has_labels=False``).
    """
    entry = get_entry(name)
    params = dict(params or {})
    accepted = entry.parameters
    for key in params:
        if key in entry.store_params:
            raise ParameterError(f"parameter {key!r} of method {name!r} is filled from the store (ingest "
                                 "constraints or labels with the points); it cannot be set")
        if key not in accepted:
            others = sorted(n for n, e in REGISTRY.items() if key in e.parameters)
            hint = f"; {key!r} is a parameter of {others}" if others else ""
            raise ParameterError(f"method {name!r} has no parameter {key!r}; accepted: {sorted(accepted)}{hint}")
    if entry.needs_labels and has_labels is False:
        raise ParameterError(f"method {name!r} needs labels (-1 = unlabeled): pass labels=... (CLI --labels) "
                             "or use a store ingested with labels")
    full = {**accepted, **params}
    if estimator:
        check_estimator_params(entry, full)
    return full


#: Stand-in data size for the early parameter check: bounds that depend on n are checked again at fit.
_ANY_N = float("inf")


def check_estimator_params(entry: MethodEntry, params: dict) -> None:
    """Let the estimator refuse bad values before any work: its ``_check_params()`` (or ``_check_params(n)``
    with n unbounded: the size-dependent bounds are checked at fit, once n is known) when it has one."""
    est = make_estimator(entry, params)
    for name in ("_check_params",):
        checker = getattr(est, name, None)
        if checker is None:
            continue
        required = [p for p in inspect.signature(checker).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if not required:
            checker()
        elif [p.name for p in required] == ["n"]:
            checker(_ANY_N)
        return


def make_estimator(entry: MethodEntry, params: dict, **store_params: Any) -> Any:
    """``entry``'s estimator built from ``params`` (JSON lists turned back into tuples where the default is one)."""
    defaults = entry.parameters
    kwargs = {k: _as_default_type(v, defaults.get(k)) for k, v in params.items()}
    return entry.estimator_class(**kwargs, **store_params)


def _as_default_type(value: Any, default: Any) -> Any:
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    return value


# ---- per-point outputs of a fitted model (runs on the Dask workers) -----------------------------------------
def point_outputs(entry: MethodEntry, model: Any, X_rows: np.ndarray) -> dict[str, np.ndarray]:
    """The outputs of ``entry`` for new rows ``X_rows`` (m, d) with a fitted ``model``; float32 rows give a
    float32 embedding (the estimators' dtype convention), any other rows float64.

    ``embedding`` (m, k) is ``model.transform`` (classifiers: their kernel features); ``scores`` (m, c) is
    ``class_scores`` (classifiers) or ``decision_function`` and ``labels`` (m,) ``predict``.
    """
    X_rows = np.asarray(X_rows)
    if X_rows.dtype != np.float32:  # a float32 store's rows stay float32: the estimators then return float32
        X_rows = X_rows.astype(np.float64, copy=False)
    out: dict[str, np.ndarray] = {}
    for name in entry.outputs:
        if name == EMBEDDING:
            fn = getattr(model, "transform", None) or getattr(model, "kernel_features")
            Z = np.asarray(fn(X_rows))
            out[name] = Z if Z.dtype == np.float32 else Z.astype(np.float64, copy=False)
        elif name == SCORES:
            fn = getattr(model, "class_scores", None) or model.decision_function  # (m, c) per-class scores
            out[name] = np.asarray(fn(X_rows), dtype=np.float64)
        elif name == LABELS and EMBEDDING in out and hasattr(model, "rule_"):  # a clusterer: from its embedding
            out[name] = model.rule_.labels(out[EMBEDDING])
        elif name == LABELS:
            out[name] = np.asarray(model.predict(X_rows), dtype=np.int64)
    return out


def fitted_outputs(entry: MethodEntry, model: Any) -> dict[str, np.ndarray] | None:
    """The transductive outputs of the fit points (fit-row order), or None when the fit points are mapped
    like new points (parametric methods: ``transform(X_fit)`` is their embedding)."""
    embedding = getattr(model, "embedding_", None)
    if embedding is None and hasattr(model, "eigenvectors_") and LABELS in entry.outputs:
        embedding = model.kernel_features()
    if embedding is None:
        return None
    out = {EMBEDDING: np.asarray(embedding, dtype=np.float64)}
    if SCORES in entry.outputs:
        out[SCORES] = np.asarray(model.scores_, dtype=np.float64)
    if LABELS in entry.outputs:  # a classifier's transduction, a clusterer's labels
        out[LABELS] = np.asarray(model.transduction_ if SCORES in entry.outputs else model.labels_, dtype=np.int64)
    return out
