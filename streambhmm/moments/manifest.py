"""A moment store's manifest (MOMENTS/manifest.json) as a dataclass: the plan of partials,
the feature settings, the version check on reading, and the one compatibility check."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, field

from .. import __version__
from ..io.documents import Document, version_problem
from ..io.names import chromosome_name_problem
from ..io.rows import quoted
from ..io.storage import Location
from .spec import FeatureSpec

MOMENT_STORE_FORMAT = "streambhmm-moment-store"
MOMENT_STORE_VERSION = 3  # 2: coverage and pair histograms; 3: per-state coverage (coverage_features)
MANIFEST = "manifest.json"
ENTRY_KEYS = ("chromosome", "chunk", "digest", "path", "n_triples", "sha256")
_ENTRY_TYPES = {"chromosome": str, "chunk": int, "digest": str, "path": str, "n_triples": int, "sha256": str}


class MomentStoreError(ValueError):
    """A moment store that is incomplete, corrupted, incompatible or too new."""


class SettingsMismatch(MomentStoreError):
    """A moment store of other feature settings or samples than a run's."""


class SourceMismatch(MomentStoreError):
    """A moment store computed from another counts store (or one since moved) than a run's."""


def is_moment_store(path) -> bool:
    return (Location.of(path) / MANIFEST).exists()


def read_manifest(root) -> "Manifest":
    return Manifest.read(root)


def partial_relpath(chrom: str, chunk: int, digest: str) -> str:
    return f"partials/{chrom}/{chunk:06d}-{digest[:32]}"


@dataclass(frozen=True)
class Manifest(Document):
    """What a moment store holds: its feature (FeatureSpec.record), samples, partials in
    summation order ({chromosome, chunk, digest, path, n_triples, sha256}) and whether it is complete."""

    feature: dict
    samples: list[str]
    complete: bool = False
    partials: list[dict] = field(default_factory=list)
    source: dict = field(default_factory=dict)
    updated: str = ""
    created_by: str = f"streambhmm {__version__}"
    format_version: int = MOMENT_STORE_VERSION

    @classmethod
    def of(cls, settings: dict, entries: list[dict], complete: bool, source: dict) -> "Manifest":
        """The manifest of partials ``entries`` of the feature ``settings`` (record and samples), now."""
        return cls({k: v for k, v in settings.items() if k != "samples"}, settings["samples"], complete,
                   [{k: e[k] for k in ENTRY_KEYS} for e in entries], source,
                   datetime.datetime.now(datetime.timezone.utc).isoformat())

    @property
    def chromosomes(self) -> list[str]:
        return list(dict.fromkeys(e["chromosome"] for e in self.partials))

    @property
    def counts_store(self) -> str | None:
        """The counts store the moments were computed from, when it is still there (None: they
        were merged from several stores, or it is gone)."""
        path = self.source.get("counts_store")
        return path if path and Location.of(path).exists() else None

    @property
    def n_triples(self) -> int:
        return int(sum(e["n_triples"] for e in self.partials))

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec.of_record(self.feature)

    @property
    def settings(self) -> dict:
        """Everything a partial depends on besides the counts: the feature and the samples."""
        return {**self.feature, "samples": self.samples}

    def to_json(self) -> dict:
        return {"format": MOMENT_STORE_FORMAT, "format_version": self.format_version, "feature": self.feature,
                "samples": self.samples, "complete": self.complete, "chromosomes": self.chromosomes,
                "n_triples": self.n_triples, "partials": self.partials, "source": self.source,
                "updated": self.updated, "created_by": self.created_by}

    @classmethod
    def read(cls, root) -> "Manifest":
        """The manifest of the moment store ``root``, checked: MomentStoreError names any problem."""
        root = Location.of(root)
        try:
            document = json.loads((root / MANIFEST).read_text())
        except FileNotFoundError:
            raise MomentStoreError(f"{root}: no moment store here (no {MANIFEST})") from None
        except json.JSONDecodeError as exc:
            raise MomentStoreError(f"{root / MANIFEST} is not valid JSON ({exc})") from None
        if not isinstance(document, dict) or document.get("format") != MOMENT_STORE_FORMAT:
            raise MomentStoreError(f"{root}: not a streambhmm moment store ({MANIFEST} is not one's manifest)")
        version = document.get("format_version")
        problem = version_problem(version, MOMENT_STORE_VERSION, MOMENT_STORE_VERSION)
        if problem == "not an integer":
            raise MomentStoreError(f"{root / MANIFEST}: format_version is not an integer "
                                   f"({json.dumps(version)[:200]})")
        if problem == "newer":
            raise MomentStoreError(f"{root}: moment store format version {version} is newer than this "
                                   f"streambhmm supports ({MOMENT_STORE_VERSION}); upgrade streambhmm")
        if problem == "older":
            raise MomentStoreError(f"{root}: moment store format version {version} lacks the histograms that "
                                   f"version {MOMENT_STORE_VERSION} fits with; rerun `streambhmm moments` with a "
                                   f"new --output (or delete {root} and rerun it)")
        _check_entries(root, document.get("partials"))
        return cls(document["feature"], document["samples"], bool(document.get("complete")), document["partials"],
                   document.get("source", {}), document.get("updated", ""), document.get("created_by", ""), version)

    def check_settings(self, root, settings: dict, error: str = "mismatched feature settings",
                       whose: str = "this run", advice: str = "Use another --output.") -> None:
        """The one compatibility check: refuse (MomentStoreError) feature ``settings`` (a record
        and its samples; ``whose`` they are) other than this store's, naming each that differs."""
        have = self.settings
        if have != settings:
            differ = ", ".join(f"{k} {_shown(have.get(k))} ({whose}: {_shown(settings.get(k))})"
                               for k in dict.fromkeys([*have, *settings]) if have.get(k) != settings.get(k))
            raise SettingsMismatch(f"{root}: {error}: the moment store has {differ}. {advice}")

    def check_request(self, root, samples, spec: FeatureSpec, asking: str = "--samples") -> None:
        """Refuse moments other than those asked for: ``samples`` (None: any; what ``asking``
        names) and ``spec`` (its bins; its kind unless "auto"; pooled when asked; its block
        size when given)."""
        have = self.feature
        if samples and list(samples) != self.samples:
            if sorted(samples) == sorted(self.samples):
                raise MomentStoreError(f"{root} holds moments of samples {','.join(self.samples)}, in that order; "
                                       f"give {asking} in that order (or leave it out)")
            raise MomentStoreError(f"{root} holds moments of samples {','.join(self.samples)}; those of "
                                   f"{','.join(samples)} (the samples asked for) need `streambhmm moments` with "
                                   f"{asking} {','.join(samples)}")
        if have["n_bins"] != spec.n_bins:
            raise MomentStoreError(f"{root} holds moments with --bins {have['n_bins']}, not {spec.n_bins}")
        if spec.kind != "auto" and spec.kind != have.get("kind", "beta"):
            raise MomentStoreError(f"{root} holds moments of the {have.get('kind', 'beta')} feature, "
                                   f"not --feature {spec.kind}")
        if spec.pooled and not have.get("pooled"):
            raise MomentStoreError(f"{root} holds joint moments of its samples; --pooled needs "
                                   f"`streambhmm moments --pooled`")
        if spec.block_size is not None and spec.block_size != have["block_size"]:
            raise MomentStoreError(f"{root} holds blocks of {have['block_size']:,} bp, not {spec.block_size:,}; "
                                   f"the block size is set by `streambhmm moments --block-size`")


def _shown(value) -> str:
    """A setting's value in a message ("pooled None" said nothing: it is off)."""
    return "off" if value is None or value is False else "on" if value is True else str(value)


def _check_entries(root: Location, entries) -> None:
    """Each partial entry well formed, its path exactly the one its chromosome, chunk and
    digest name (so no entry reaches outside the store), and no chunk listed twice."""
    if not isinstance(entries, list):
        raise MomentStoreError(f"{root / MANIFEST}: 'partials' is missing or not a list")
    seen = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or any(type(entry.get(key)) is not kind for key, kind in _ENTRY_TYPES.items()):
            raise MomentStoreError(f"{root / MANIFEST}: partial entry {i} is malformed: {quoted(json.dumps(entry))}")
        chrom, chunk, digest = entry["chromosome"], entry["chunk"], entry["digest"]
        if (chromosome_name_problem(chrom) or chunk < 0 or not re.fullmatch("[0-9a-f]{64}", digest)
                or entry["path"] != partial_relpath(chrom, chunk, digest)):
            raise MomentStoreError(f"{root / MANIFEST}: partial entry {i} does not name a partial of this store "
                                   f"(path {quoted(entry['path'])})")
        if (chrom, chunk) in seen:
            raise MomentStoreError(f"{root / MANIFEST}: {chrom} chunk {chunk} is listed twice; it would be "
                                   f"counted twice")
        seen.add((chrom, chunk))
