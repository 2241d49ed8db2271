"""The supervised and semi-supervised methods of the four papers, one package each: :mod:`.discriminant` (CK08),
:mod:`.nsse` (OV19), :mod:`.spectral_kernels` (LQCL09), :mod:`.graph_kpca` (STG18); :mod:`.estimator_state`
stores the fitted estimators that have no state of their own.
"""
