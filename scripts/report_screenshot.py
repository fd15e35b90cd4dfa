"""The report as a reader sees it: a report made on real data (H1 and IMR90, chr21, Lister et
al. 2009 via dmrseq), photographed by headless Chromium at 1400 px wide.

    python scripts/report_screenshot.py [--workdir DIR] [--output docs/figures/report.png]
                                        [--height 2450] [--region chr21:33,300,000-33,500,000]

Ingests the four files (two samples, their replicates summed) from $STREAMBHMM_REAL_DATA
(default ../shared/data/real beside the repository), fits 5 states with the default method,
writes the report, and runs ``chromium --headless --screenshot`` on its index.html
(``apt-get install -y chromium`` where /usr/bin/chromium is missing). It prints each step's
time and where the PNG went; look at the PNG.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STREAMBHMM_REAL_DATA", ROOT.parent / "shared" / "data" / "real"))
SET = "dmrseq_BS.chr21_H1_IMR90"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def streambhmm(*args) -> None:
    command = [str(Path(sys.executable).with_name("streambhmm")), *map(str, args), "-q"]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    print(f"  ({time.perf_counter() - start:.1f} s: streambhmm {args[0]})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the store, model and report here")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "figures" / "report.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2450)
    parser.add_argument("--region", default="chr21:33,300,000-33,500,000")
    parser.add_argument("--states", type=int, default=5)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium on PATH: apt-get install -y chromium")
    data = REAL / SET
    if not data.is_dir():
        sys.exit(f"{data} is missing (set STREAMBHMM_REAL_DATA to the folder of the real data sets)")
    with tempfile.TemporaryDirectory(prefix="report-screenshot-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        store, model, report = work / "h1_imr90.zarr", work / f"m{args.states}.json", work / "report"
        if not store.exists():
            for sample in ("H1", "IMR90"):
                streambhmm("ingest", data / f"{sample}_r1.chr21.hg18.tsv.gz", data / f"{sample}_r2.chr21.hg18.tsv.gz",
                           "--sample", sample, "--store", store)
        if not model.exists():
            streambhmm("fit", store, "--states", args.states, "--output", model)
        streambhmm("report", store, "--model", model, "--output", report, "--region", args.region)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, *CHROMIUM_FLAGS, f"--screenshot={args.output.resolve()}",
                        f"--window-size={args.width},{args.height}", (report / "index.html").resolve().as_uri()],
                       check=True, capture_output=True, timeout=300)
    print(f"{args.output}: the report at {args.width} x {args.height} px")


if __name__ == "__main__":
    main()
