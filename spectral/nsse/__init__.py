"""OV19 (Örnek & Vural 2019): NSSE (nonlinear supervised smooth embedding) and its SUPLAP baseline.

>>> from spectral.nsse import NSSE, SupervisedLaplacianEigenmaps   # doctest: +SKIP
"""

from .nsse import NSSE, SupervisedLaplacianEigenmaps

__all__ = ["NSSE", "SupervisedLaplacianEigenmaps"]
