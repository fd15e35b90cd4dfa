"""Metadata documents (the JSON files streambhmm writes beside its data) as dataclasses: a
read-only view of their JSON keys and the one version rule, as bio2zarr keeps its metadata."""

from __future__ import annotations

import json


class Document:
    """Base of a metadata document: :meth:`to_json` is the document as written; its keys
    read as a mapping's (``doc["samples"]``, ``doc.get("pooled")``, ``"labels" in doc``)."""

    def to_json(self) -> dict:
        raise NotImplementedError

    def __getitem__(self, key):
        return self.to_json()[key]

    def get(self, key, default=None):
        return self.to_json().get(key, default)

    def __contains__(self, key) -> bool:
        return key in self.to_json()

    def keys(self):
        return self.to_json().keys()


def version_problem(version, supported: int, oldest: int | None = None) -> str | None:
    """What is wrong with a document's format version for a reader of version ``supported``
    (that reads back to ``oldest``, None: every older one): "not an integer", "newer" or
    "older"; None when it is readable."""
    if type(version) is not int:
        return "not an integer"
    if version > supported:
        return "newer"
    if oldest is not None and version < oldest:
        return "older"
    return None


def written_by(data: bytes) -> tuple[str, str | None] | None:
    """(its "format", the command recorded under "call") of a JSON document given as its bytes
    (a model: `hmr`'s and `pmd`'s --save-model record their command, `fit`'s none), or None for
    bytes that are no JSON object."""
    try:
        document = json.loads(data)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None
    if not isinstance(document, dict):
        return None
    call = document.get("call")
    command = call.get("command") if isinstance(call, dict) else None
    return str(document.get("format")), command if isinstance(command, str) else None
