"""The report's figures read without a legend or label cut off: positions in Mb, the states'
colours named."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from streambhmm.app.report_figures import megabases, plot_occupancy, state_legend  # noqa: E402


def test_positions_are_in_megabases_without_an_offset():
    fig, ax = plt.subplots()
    ax.plot([33_300_000, 33_500_000], [0, 1])
    ax.set_xlim(33_300_000, 33_500_000)
    megabases(ax, 33_300_000, 33_500_000, "chr21")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(label.startswith("33.") and len(label.split(".")[1]) == 3 for label in labels), labels
    assert ax.xaxis.get_offset_text().get_text() == "" and ax.get_xlabel() == "chr21 position (Mb)"
    plt.close(fig)


def test_the_state_legend_names_every_state_least_methylated_first():
    fig = plt.figure()
    levels = np.array([[0.9, 0.8], [0.05, 0.1], [0.6, 0.2]])
    legend = state_legend(fig, levels, ["high", "unmethylated", "intermediate:A|low:B"])
    assert [t.get_text() for t in legend.get_texts()] == ["1 unmethylated", "2 intermediate:A|low:B", "0 high"]
    plt.close(fig)


def test_a_saved_figure_keeps_its_legend_inside(tmp_path):
    path = tmp_path / "occupancy.png"
    plot_occupancy(path, {"chr1": np.array([10, 30, 60]), "chr2": np.array([5, 5, 90])},
                   np.array([[0.9], [0.05], [0.6]]), ["high", "unmethylated", "intermediate"])
    image = matplotlib.image.imread(path)
    # the legend is drawn under the axes: the saved image is taller than the figure's axes alone
    assert image.shape[0] > 1.46 * 110 and image.shape[1] > 400  # beyond the figure: the legend under it


def test_the_occupancy_of_many_contigs_keeps_the_largest_and_pools_the_rest(tmp_path, monkeypatch):
    """A helper's genome of 3,010 contigs made an occupancy figure 92,875 pixels high."""
    from streambhmm.app import report_figures

    drawn = {}
    monkeypatch.setattr(report_figures, "_save", lambda fig, path: drawn.update(
        rows=[t.get_text() for t in fig.axes[0].get_yticklabels()], height=fig.get_size_inches()[1]))
    bins = {f"chrUn_{k}": np.array([k % 3, 1, 1]) for k in range(500)} | {"chr1": np.array([900, 50, 50])}
    bins |= {"chr2": np.array([10, 400, 400])}
    plot_occupancy(tmp_path / "o.png", bins, np.array([[0.9], [0.05], [0.6]]), ["high", "unmethylated", "mid"])
    rows = drawn["rows"]
    assert len(rows) == report_figures.OCCUPANCY_ROWS and rows[-1] == "473 others (1,391)" and drawn["height"] < 10
    # the store's order kept, each row's covered bins beside its name
    assert rows.index("chr1 (1,000)") < rows.index("chr2 (810)") and rows[:2] == ["chrUn_2 (4)", "chrUn_5 (4)"]


def test_region_files_are_read_and_the_track_centres_on_the_best_scoring_region(tmp_path):
    from types import SimpleNamespace

    import pytest

    from streambhmm.app.report import _region_around, read_region_sets
    from streambhmm.io.bed import BedItem

    bed = tmp_path / "dmr.bed"
    bed.write_text('track name="x"\n# comment\nchr1\t100\t300\tgain\t500\t+\t100\t300\t200,0,0\n'
                   'chr2\t5000\t9000\tloss\t900\t+\t5000\t9000\t0,0,200\nchr3\t10\t20\n')
    [(name, items)] = read_region_sets([bed])
    assert name == "dmr" and items[0] == BedItem("chr1", 100, 300, "gain", 500.0, (200, 0, 0))
    assert items[2] == BedItem("chr3", 10, 20, "", 0.0, None)
    store = SimpleNamespace(chromosomes=["chr1", "chr2"], bin_size=100, path="counts.zarr")
    # the highest score (chr2's, 4 kb): REGION_BINS bins of 100 bp around its middle, from 0 at the start
    view = _region_around(store, (name, items))
    assert (view.chrom, view.start, view.end) == ("chr2", 0, 50_000)
    long = [BedItem("chr1", 1_000_000, 1_100_000, "domain", 1.0, None)]
    view = _region_around(store, ("pmd", long))  # wider than 500 bins: three times the region
    assert (view.start, view.end) == (1_050_000 - 150_000, 1_050_000 + 150_000)
    tied = [BedItem("chr1", 100, 300, "DMR9", 1000.0, None),
            BedItem("chr1", 1_000_000, 1_001_000, "DMR1", 1000.0, None)]
    view = _region_around(store, ("dmr", tied))  # equal scores: the longest, not the first
    assert (view.chrom, view.start, view.end) == ("chr1", 1_000_500 - 25_000, 1_000_500 + 25_000)
    with pytest.raises(ValueError, match="pmd.bed has no region on the chromosomes of counts.zarr"):
        _region_around(store, ("pmd", [BedItem("chrX", 0, 10, "", 0.0, None)]))
    for text, why in (("chr1\t300\t100\n", "its start is not before its end"),
                      ("chr1\t1\t2\tx\t0\t+\t1\t2\t300,0,0\n", "its itemRgb is not R,G,B"),
                      ("chr1 1 2\n", "not BED")):
        bed.write_text("chr1\t1\t2\n" + text)
        with pytest.raises(ValueError, match=f"{bed}:2: {why}"):
            read_region_sets([bed])
