"""Text to store: formats, readers, ingest, the counts store and storage locations."""
