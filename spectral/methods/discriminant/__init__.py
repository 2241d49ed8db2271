"""CK08 (Chatpatanasiri & Kijsirikul 2008): supervised and semi-supervised spectral dimensionality reduction
(DNE, MFA, LFDA).

Linear (eq. 7), kernel (eq. 10, exact or Nyström) and transductive (eq. 4) forms, each supervised
(``gamma=0``) or semi-supervised with the manifold regularizer ``gamma W^(2)`` (eq. 12-13).
At-scale fitting over chunked (Dask) arrays lives in :mod:`spectral.methods.discriminant.scale`.
"""

from eigenflow.spectral.methods.discriminant.estimators import DNE, LFDA, MFA

__all__ = ["DNE", "MFA", "LFDA"]
