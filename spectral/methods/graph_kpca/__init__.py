"""GRAD: graph-adaptive nonlinear dimensionality reduction (STG18: Shen, Traganitis & Giannakis 2018).

- :class:`GraphKPCA` — graph-regularized kernel PCA (eq. 13), graph kernels (eq. 14), must-link /
  cannot-link constraints (eq. 22-24), dense or Nystrom + implicit operator at scale.
- :class:`MultiGraphKPCA` — multi-kernel (eq. 15-17), multi-graph (eq. 18-20), multi-modal (eq. 21).
- :class:`LNEG` — local nonlinear embedding on graphs (eq. 25-30).
"""

from eigenflow.spectral.methods.graph_kpca.gkpca import GraphKPCA
from eigenflow.spectral.methods.graph_kpca.lneg import LNEG
from eigenflow.spectral.methods.graph_kpca.multi import MultiGraphKPCA

__all__ = ["GraphKPCA", "LNEG", "MultiGraphKPCA"]
