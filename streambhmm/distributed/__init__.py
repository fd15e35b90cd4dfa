"""Work on a counts store on Dask: the cluster, EM, scoring, decoding, regions and tracks, fits and batches."""
