"""The report's HTML page: the states' table, the figures, and the provenance (inputs,
settings, versions, timings)."""

from __future__ import annotations

import html
import platform
from importlib import metadata

from ..learn.states import state_colours as rgb_colours
from ..learn.states import state_order

WIDE_FIGURES = ("track.png",)  # across the page; the others two by two
WIDE = ' class="wide"'
VERSIONED = ("streambhmm", "numpy", "scipy", "numba", "dask", "distributed", "zarr", "xarray", "matplotlib")


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _state_rows(document, hmm, decoded, differential) -> str:
    """The states' table: levels per sample, weight, stay, decoded bins; least methylated first."""
    e = html.escape
    weight = hmm.startprob_  # the model's weights, as in its JSON and fit's table
    occupancy = decoded.state_bins / max(decoded.n_bins, 1)
    rows = []
    colours, labels = rgb_colours(hmm.methylation_), document.labels
    for h in state_order(hmm.methylation_):
        label = labels[h]
        cells = "".join(f"<td>{v:.3f}</td>" for v in hmm.methylation_[h])
        swatch = f'<span style="color:rgb{tuple(colours[h])}">&#9632;</span>'
        rows.append(f"<tr><td>{h}{' *' if h in differential else ''}</td><td class=\"label\">{swatch} {e(label)}</td>"
                    f"{cells}<td>{weight[h]:.3f}</td><td>{hmm.transmat_[h, h]:.3f}</td><td>{occupancy[h]:.1%}</td></tr>")
    return "".join(rows)


def _input_rows(counts, samples) -> str:
    """Each sample's format, context and files (with their digests), from the store's provenance."""
    e = html.escape
    inputs = []
    for name in samples:
        prov = counts.meta.samples.get(name, {})
        files = "<br>".join(f"{e(str(f.get('path', '')))} <small>sha256 {e(str(f.get('sha256', ''))[:16])}…</small>"
                            for f in prov.get("files", []))
        inputs.append(f"<tr><td>{e(name)}</td><td>{e(str(prov.get('format', '')))}</td>"
                      f"<td>{e(str(prov.get('context', '')))}</td><td>{files}</td></tr>")
    return "".join(inputs)


def _settings(counts, document, model_path, decoded, region, max_gap) -> dict:
    return {
        "store": str(counts.path), "bin size": f"{counts.bin_size} bp", "model": str(model_path),
        "method": document.method, "states": document.n_states, "feature": str(document.feature),
        "triples": f"{document.n_triples:,}", "model created by": document.created_by,
        "log-likelihood": _loglik(document),
        "decoding": "posterior (most probable state per bin)", "max gap": f"{max_gap} bp",
        "track region": str(region), "segments": f"{decoded.n_segments:,}",
        "covered bins": f"{decoded.n_bins:,}",
    }


def _loglik(document) -> str:
    """The model's log-likelihood, or what was fitted instead and why there is none."""
    if document.loglik is not None:
        return f"{document.loglik:.6g} (EM, on the counts)"
    fitted = f"moment-fit criterion {document.moment_loss:.6g}; " if document.moment_loss is not None else ""
    return (f"none: --method {document.method} fits the moments of one pass and never computes the likelihood "
            f"of the counts ({fitted}`streambhmm score` computes it)")


def _table_rows(values: dict, unit: str = "") -> str:
    e = html.escape
    return "".join(f"<tr><td>{e(k)}</td><td>{e(str(v)) if not unit else f'{v:.2f}{unit}'}</td></tr>"
                   for k, v in values.items())


def render_page(counts, document, model_path, hmm, decoded, figures, region, max_gap, differential, timings) -> str:
    e = html.escape
    samples = document.samples
    head = "".join(f"<th>{e(s)}</th>" for s in samples)
    rows, inputs = _state_rows(document, hmm, decoded, differential), _input_rows(counts, samples)
    versions = _table_rows(_versions())
    setting_rows = _table_rows(_settings(counts, document, model_path, decoded, region, max_gap))
    timing_rows = _table_rows(timings, " s")
    figure_html = "\n".join(f'<figure{WIDE if name in WIDE_FIGURES else ""}><img src="{name}" alt="{e(name)}">'
                            f'<figcaption>{e(caption)}</figcaption></figure>' for name, caption, _ in figures)
    diff_text = ", ".join(map(str, differential)) if differential else "none"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>streambhmm report: {e(str(counts.path.name))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1320px; padding: 0 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; font-size: 0.9em; }}
td:first-child, th:first-child, td.label {{ text-align: left; }} td:first-child {{ white-space: nowrap; }}
.figures {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(600px, 1fr)); gap: 1.5em 2.5em;
            align-items: start; }}
figure {{ margin: 0; }} figure img {{ max-width: 100%; }} figure.wide {{ grid-column: 1 / -1; }}
figcaption {{ font-size: 0.9em; color: #555; margin-top: 0.3em; }}
.provenance {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(600px, 1fr)); gap: 0 2.5em; }}
</style></head><body>
<h1>streambhmm report</h1>
<p>{e(str(counts.path))}: {len(samples)} sample(s), {len(counts.chromosomes)} chromosome(s), {decoded.n_bins:,}
covered bins in {decoded.n_segments:,} segments (<a href="segments.bed">segments.bed</a>).
Differential states: {e(diff_text)}.</p>
<h2>States</h2>
<table><tr><th>state</th><th>label</th>{head}<th>weight</th><th>stay</th><th>decoded bins</th></tr>
{rows}</table>
<h2>Figures</h2>
<div class="figures">
{figure_html}
</div>
<h2>Provenance</h2>
<h3>Inputs</h3>
<table><tr><th>sample</th><th>format</th><th>context</th><th>files</th></tr>{inputs}</table>
<div class="provenance"><div>
<h3>Settings</h3><table>{setting_rows}</table></div><div>
<h3>Versions</h3><table>{versions}</table>
<h3>Timings</h3><table>{timing_rows}</table></div></div>
</body></html>
"""
