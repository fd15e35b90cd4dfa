"""What ``streambhmm fit`` fits: its methods and their emissions (the moments a fit starts
from are distributed/fitdata.py's; model selection is learn/selection.py's).

Methods (the model JSON's ``method``):
    refined     one pass: the moments (and histograms) of the data, FTD's estimate and other
                starts refined on them (streambhmm.learn.refine); never reads the counts twice
    ftd         one pass: the paper's tensor decomposition alone
    em          Baum-Welch on the counts store from random starts, the best of --em-starts
    refined-em  EM from the refined fit
    ftd-em      EM from FTD's estimate
"""

from __future__ import annotations

METHODS = ("refined", "ftd", "em", "refined-em", "ftd-em")
ONE_PASS = ("refined", "ftd")
MOMENT_STORE_METHOD = "refined"
# fit STORE's default: measured on the real data sets (docs/guide/fit.md, "Which method fit runs")
COUNTS_STORE_METHOD = "refined"
# the emission of the EM methods and of the refined one-pass fit: measured on the real data sets
# (docs/guide/fit.md, "Emissions"; scripts/real_data_fits.py --emission); FTD's is binomial
EM_EMISSION = "betabinomial"
REFINED_EMISSION = "betabinomial"



def default_emission(method: str) -> str:
    """The emission a method fits unless --emission says otherwise."""
    return "binomial" if method == "ftd" else REFINED_EMISSION if method == "refined" else EM_EMISSION
