"""scikit-learn's transformer conventions shared by every embedding estimator of :mod:`spectral`.

- float32 in, float32 out (the ``preserves_dtype`` tag): the estimators compute in float64 and
  ``transform`` / ``fit_transform`` return float32 when they were given float32 ``X`` (halving the memory of
  a written-back embedding); any other input gives float64.
- ``get_feature_names_out`` (``"<classname>0"``, ``"<classname>1"``, ...), hence ``set_output(transform=
  "pandas")`` and named columns in pipelines.
"""

from __future__ import annotations

import functools

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin

#: the input dtypes whose embedding keeps the dtype (the others give float64)
PRESERVED_DTYPES = ("float64", "float32")


def _keeps_float32(method):
    @functools.wraps(method)
    def wrapped(self, X, *args, **kwargs):
        out = method(self, X, *args, **kwargs)
        if getattr(X, "dtype", None) == np.float32 and isinstance(out, np.ndarray) and out.dtype == np.float64:
            return out.astype(np.float32)
        return out

    return wrapped


class EmbeddingTransformerMixin(ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """Mixin of the embedding estimators (module docstring); they hold ``embedding_`` (n, n_components)."""

    def __init_subclass__(cls, **kwargs):
        # the dtype wrapper first, so that set_output's wrapper (installed by TransformerMixin) sees float32
        for name in ("transform", "fit_transform"):
            if name in cls.__dict__:
                setattr(cls, name, _keeps_float32(cls.__dict__[name]))
        super().__init_subclass__(**kwargs)

    @property
    def _n_features_out(self) -> int:
        """Number of embedding columns (AttributeError before fit, so get_feature_names_out raises NotFittedError)."""
        return self.embedding_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = list(PRESERVED_DTYPES)
        return tags
