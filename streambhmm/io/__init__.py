"""Text to store: formats, readers, ingest, the counts store and storage locations (and bounded waits on
Dask tasks, which every layer uses)."""
