"""The one pass: features, moment sums and kernels, block statistics, the Dask moment graph and the moment store."""
