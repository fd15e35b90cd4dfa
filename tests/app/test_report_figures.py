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
