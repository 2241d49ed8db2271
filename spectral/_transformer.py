"""scikit-learn's transformer conventions shared by every embedding estimator of :mod:`spectral`.

- float32 in, float32 out (the ``preserves_dtype`` tag): the estimators compute in float64 and
  ``transform`` / ``fit_transform`` return float32, and ``fit`` keeps ``embedding_`` in float32, when they were
  given float32 ``X`` (an array, or a DataFrame of float32 columns; halving the memory of a written-back
  embedding); any other input gives float64.
- ``get_feature_names_out`` (``"<classname>0"``, ``"<classname>1"``, ...), hence ``set_output(transform=
  "pandas")`` and named columns in pipelines.
"""

from __future__ import annotations

import functools

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin

#: the input dtypes whose embedding keeps the dtype (the others give float64)
PRESERVED_DTYPES = ("float64", "float32")


def is_float32(X) -> bool:
    """Whether ``X`` holds float32 values only: an array of that dtype, or a DataFrame whose columns all are."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is not None and not hasattr(X, "dtype"):  # a DataFrame
        return len(dtypes) > 0 and all(dtype == np.float32 for dtype in dtypes)
    return getattr(X, "dtype", None) == np.float32


def _float32_of(out):
    return out.astype(np.float32) if isinstance(out, np.ndarray) and out.dtype == np.float64 else out


def _keeps_float32(method):
    @functools.wraps(method)
    def wrapped(self, X, *args, **kwargs):
        out = method(self, X, *args, **kwargs)
        return _float32_of(out) if is_float32(X) else out

    return wrapped


def _fits_float32(fit):
    """``fit`` that leaves ``embedding_`` in float32 for float32 ``X`` (as ``transform`` returns it)."""
    @functools.wraps(fit)
    def wrapped(self, X, *args, **kwargs):
        out = fit(self, X, *args, **kwargs)
        if is_float32(X) and hasattr(self, "embedding_"):
            self.embedding_ = _float32_of(self.embedding_)
        return out

    return wrapped


class EmbeddingTransformerMixin(ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """Mixin of the embedding estimators (module docstring); they hold ``embedding_`` (n, n_components)."""

    def __init_subclass__(cls, **kwargs):
        # the dtype wrapper first, so that set_output's wrapper (installed by TransformerMixin) sees float32
        for name in ("transform", "fit_transform"):
            if name in cls.__dict__:
                setattr(cls, name, _keeps_float32(cls.__dict__[name]))
        if "fit" in cls.__dict__:
            cls.fit = _fits_float32(cls.__dict__["fit"])
        super().__init_subclass__(**kwargs)

    @property
    def _n_features_out(self) -> int:
        """Number of embedding columns (AttributeError before fit, so get_feature_names_out raises NotFittedError)."""
        return self.embedding_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = list(PRESERVED_DTYPES)
        return tags
