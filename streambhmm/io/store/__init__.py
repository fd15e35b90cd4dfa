"""The counts store (format version 2), by concern: schema (the format, its metadata
document and per-position variables), reader (CountsStore, open_store), chunks (chunk
references and digests), locking, recovery, commit (a staged sample put in place), writer
(SampleWriter: staging and the commit's checks) and upgrade (version 1 to 2)."""

from .chunks import ChunkRef, chunk_digest, chunk_summary
from .commit import consolidate, mark_changed, replace_store, staging_path
from .locking import locked
from .reader import CountsStore, StoreOverview, open_store
from .recovery import needs_recovery, recover
from .schema import (COMMIT, COUNT_DTYPE, COUNT_MAX, COUNTS, COUNTS_FORMAT, COUNTS_VERSION, COVERED,
                     DEFAULT_CHUNK_SIZE, DIGEST, FIELDS, INDEX_CHUNK, LAST, POSITION, POSITION_MAX, PREVIOUS, SUMS,
                     StoreAttrs, StoreError, natural_key, natural_sorted, per_position_variables)
from .upgrade import upgrade_store
from .writer import DISK_ERRNOS, SampleWriter

__all__ = ["COMMIT", "COUNT_DTYPE", "COUNT_MAX", "COUNTS", "COUNTS_FORMAT", "COUNTS_VERSION", "COVERED",
           "DEFAULT_CHUNK_SIZE", "DIGEST", "DISK_ERRNOS", "FIELDS", "INDEX_CHUNK", "LAST", "POSITION", "POSITION_MAX",
           "PREVIOUS", "SUMS", "ChunkRef", "CountsStore", "SampleWriter", "StoreAttrs", "StoreError", "StoreOverview",
           "chunk_digest", "chunk_summary", "consolidate", "locked", "mark_changed", "natural_key", "natural_sorted",
           "needs_recovery", "open_store", "per_position_variables", "recover", "replace_store", "staging_path",
           "upgrade_store"]
