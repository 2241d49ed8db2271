"""OV19 (Örnek & Vural 2019): NSSE (nonlinear supervised smooth embedding) and its SUPLAP baseline.

>>> from eigenflow.spectral.methods.nsse import NSSE, SupervisedLaplacianEigenmaps   # doctest: +SKIP
"""

from eigenflow.spectral.methods.nsse.nsse import NSSE, SupervisedLaplacianEigenmaps

__all__ = ["NSSE", "SupervisedLaplacianEigenmaps"]
