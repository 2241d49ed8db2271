"""Linear operators and kernels: :mod:`.linear` (sparse, low-rank, scaled sums, Dask row blocks),
:mod:`.kernels` (scikit-learn's kernels) and :mod:`.nystrom_features` (landmarks and the Nystrom feature map,
the one Nystrom map of every method).
"""
