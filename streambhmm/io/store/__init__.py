"""The counts store (format version 2), by concern: schema (the format, its metadata
document and per-position variables), reader (CountsStore, open_store), chunks (chunk
references and digests), locking, recovery, commit (a staged sample put in place), writer
(SampleWriter: staging and the commit's checks) and upgrade (version 1 to 2)."""

from .chunks import ChunkRef, chunk_digest, covered_bins
from .commit import consolidate, mark_changed, staging_path
from .locking import locked
from .reader import CountsStore, StoreOverview, open_store, recorded_format, recorded_inputs, store_inputs
from .recovery import needs_recovery, recover
from .schema import (COMMIT, COUNTS_FORMAT, COUNTS_VERSION, COVERED, DEFAULT_CHUNK_SIZE, DIGEST, FIELDS, LAST, POSITION,
                     PREVIOUS, SUMS, NoRoomError, StoreAttrs, StoreError, natural_sorted, per_position_variables)
from .upgrade import upgrade_store
from .writer import SampleWriter

__all__ = ["COMMIT", "COUNTS_FORMAT", "COUNTS_VERSION", "COVERED", "DEFAULT_CHUNK_SIZE", "DIGEST", "FIELDS", "LAST",
           "POSITION", "PREVIOUS", "SUMS", "ChunkRef", "CountsStore", "NoRoomError", "SampleWriter", "StoreAttrs",
           "StoreError", "StoreOverview", "chunk_digest", "consolidate", "covered_bins", "locked", "mark_changed",
           "natural_sorted", "needs_recovery", "open_store", "per_position_variables", "recorded_format",
           "recorded_inputs", "recover", "staging_path", "store_inputs", "upgrade_store"]
