import gzip
from pathlib import Path

import pytest

from streambhmm.formats import FormatError, detect_common_format, detect_format, read_rows

DATA = Path(__file__).parent / "data"
REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"


def lines_of(path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [line.split() for line in fh if line.strip()]


def independent(path, skip, convert, keep=lambda f: True):
    """Plain-Python reading of a file, for comparison: rows (chrom, pos0, meth, cov) with cov > 0."""
    out = []
    for f in lines_of(path)[skip:]:
        if keep(f):
            pos0, meth, cov = convert(f)
            if cov > 0:
                out.append((f[0], pos0, meth, cov))
    return out


def parsed(path, fmt, context="CG"):
    return [(r.chrom, int(p), int(m), int(c))
            for r in read_rows(path, fmt, context) for p, m, c in zip(r.pos0, r.methylated, r.coverage)]


CASES = {
    # file: (format, header lines, (pos0, methylated, coverage) from fields, row filter)
    "bsseq_bismark.cov.gz": ("bismark-cov", 0, lambda f: (int(f[1]) - 1, int(f[4]), int(f[4]) + int(f[5])), None),
    "bsseq_CpG_report.txt.gz": ("bismark-report", 0, lambda f: (int(f[1]) - 1, int(f[3]), int(f[3]) + int(f[4])), None),
    "methylKit_CX_report.txt.gz": ("bismark-report", 0, lambda f: (int(f[1]) - 1, int(f[3]), int(f[3]) + int(f[4])),
                                   lambda f: f[5] == "CG"),
    "ALLCools_Cell01.allc.tsv.gz": ("allc", 0, lambda f: (int(f[1]) - 1, int(f[4]), int(f[5])),
                                    lambda f: f[3][1] == "G"),
    "bsseq_modbam2bed_ctr1.bed.gz": ("bedmethyl", 0, lambda f: (int(f[1]), int(f[12]), int(f[11]) + int(f[12])), None),
    "bsseq_modbam2bed_ctr1.encode11.bed": ("bedmethyl", 0,
                                           lambda f: (int(f[1]), round(int(f[9]) * float(f[10]) / 100), int(f[9])), None),
    "bsseq_modkit_HG002.bed.gz": ("modkit", 0, lambda f: (int(f[1]), int(f[11]) + int(f[13]), int(f[9])), None),
    "bsseq_modkit_Hypo1.bed.gz": ("modkit", 0, lambda f: (int(f[1]), int(f[11]) + int(f[13]), int(f[9])),
                                  lambda f: f[3] == "m"),
    "converted_methyldackel_CpG.bedGraph": ("methyldackel", 1, lambda f: (int(f[1]), int(f[4]), int(f[4]) + int(f[5])), None),
    "dmrseq_H1_r1.chr21.tsv.gz": ("tsv", 1, lambda f: (int(f[1]) - 1, int(f[3]), int(f[4])), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_real_file_is_detected_and_parsed(name):
    fmt, skip, convert, keep = CASES[name]
    path = DATA / name
    assert detect_format(path) == fmt
    expected = independent(path, skip, convert, keep or (lambda f: True))
    assert expected, "the excerpt must hold rows"
    assert parsed(path, fmt) == expected


def test_coordinate_conventions_agree_across_formats():
    """The same CpGs as Bismark coverage (1-based) and MethylDackel bedGraph (0-based)."""
    assert parsed(DATA / "bsseq_bismark.cov.gz", "bismark-cov") == \
        parsed(DATA / "converted_methyldackel_CpG.bedGraph", "methyldackel")
    # ENCODE's coverage x percent and modbam2bed's exact counts agree to rounding
    # (modbam2bed's coverage column also counts calls outside canonical + modified)
    encode = parsed(DATA / "bsseq_modbam2bed_ctr1.encode11.bed", "bedmethyl")
    exact = parsed(DATA / "bsseq_modbam2bed_ctr1.bed.gz", "bedmethyl")
    assert [r[:2] for r in encode] == [r[:2] for r in exact]
    for (_, _, m11, c11), (_, _, m14, c14) in zip(encode, exact):
        assert abs(m11 / c11 - m14 / c14) <= 0.5 / c11 + 1e-12


def test_context_filter():
    cx = DATA / "methylKit_CX_report.txt.gz"
    every = parsed(cx, "bismark-report", "all")
    cg = parsed(cx, "bismark-report", "CG")
    chh = parsed(cx, "bismark-report", "CHH")
    assert len(cg) == 4 and len(chh) > 0 and len(every) > len(cg) + len(chh)
    allc = DATA / "ALLCools_Cell01.allc.tsv.gz"
    assert len(parsed(allc, "allc", "all")) > 5 * len(parsed(allc, "allc", "CG"))


def test_modkit_counts_each_call_once():
    rows = parsed(DATA / "bsseq_modkit_Hypo1.bed.gz", "modkit")
    assert len(rows) == 25  # the m rows; h rows are skipped
    assert rows[0] == ("chr1", 3000826, 2, 28)


@pytest.mark.skipif(not REAL.exists(), reason="shared/data/real not present")
@pytest.mark.parametrize("relative,fmt,n_rows,pooled", [
    ("modkit_lung_chr20/lung_00733-m_adjacent-normal_5mc-5hmc_chr20_cpg_pileup.bed.gz", "modkit", 17416, None),
    ("DMRcaller_arabidopsis_chr3/WT.Chr3_1-1Mb.CX_report.txt.gz", "bismark-report", None, None),
    ("dmrseq_BS.chr21_H1_IMR90/H1_r1.chr21.hg18.tsv.gz", "tsv", 300684, 0.8585),
    ("bsseq_BS.chr22_IMR90/IMR90_r1.chr22.hg18.tsv.gz", "tsv", 494728 - 20762, 0.769),
])
def test_whole_real_files(relative, fmt, n_rows, pooled):
    """Whole files from shared/data/real (read in place: their licenses do not allow copying)."""
    path = REAL / relative
    assert detect_format(path) == fmt
    rows = list(read_rows(path, fmt))
    n = sum(r.pos0.size for r in rows)
    if n_rows is not None:
        assert n == n_rows
    if pooled is not None:
        meth = sum(int(r.methylated.sum()) for r in rows)
        cov = sum(int(r.coverage.sum()) for r in rows)
        assert meth / cov == pytest.approx(pooled, abs=5e-4)  # the source README's figure


def write(tmp_path, name, text, gz=False):
    path = tmp_path / name
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


HEADER = "chrom\tpos\tstrand\tmc\tcov\n"


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("body,line,message,text", [
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t5\n", 3, "expected 5 fields, found 4", "chr1\t20\t+\t5"),
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t1\t5\t9\n", 3, "malformed tsv line", "chr1\t20\t+\t1\t5\t9"),
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\tabc\t5\n", 3, "malformed tsv line", "chr1\t20\t+\tabc\t5"),
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t7\t5\n", 3, "methylated count 7 exceeds coverage 5", "chr1\t20\t+\t7\t5"),
    ("chr1\t10\t+\t-1\t5\n", 2, "negative count", "chr1\t10\t+\t-1\t5"),
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t1.5\t5\n", 3, "not an integer", "chr1\t20\t+\t1.5\t5"),
    ("chr1\t30\t+\t1\t5\nchr1\t20\t+\t1\t5\n", 3, "position out of order within chr1", "chr1\t20\t+\t1\t5"),
    ("chr1\t30\t+\t1\t5\nchr2\t20\t+\t1\t5\nchr1\t40\t+\t1\t5\n", 4, "chromosome chr1 appears again",
     "chr1\t40\t+\t1\t5"),
])
def test_bad_lines_name_file_line_and_text(tmp_path, gz, body, line, message, text):
    path = write(tmp_path, "calls.tsv" + (".gz" if gz else ""), HEADER + body, gz)
    with pytest.raises(FormatError) as info:
        list(read_rows(path, "tsv"))
    err = info.value
    assert (err.path, err.line, err.text) == (str(path), line, text)
    assert message in str(err) and f"{path}:{line}" in str(err)


def test_error_far_into_a_file_has_the_right_line(tmp_path):
    body = "".join(f"chr1\t{10 * i + 1}\t+\t1\t3\n" for i in range(2999))
    body += "chr1\t99999\t+\t4\t3\n"  # line 3001 (after the header)
    path = write(tmp_path, "long.tsv", HEADER + body)
    with pytest.raises(FormatError, match=r"long.tsv:3001: methylated count 4 exceeds coverage 3"):
        list(read_rows(path, "tsv", block_bytes=7000))
    bad_text = HEADER + body.replace("chr1\t99999\t+\t4\t3", "chr1\t99999\t+\t4 3 x")
    path = write(tmp_path, "long2.tsv", bad_text)
    with pytest.raises(FormatError, match=r"long2.tsv:3001: malformed tsv line"):
        list(read_rows(path, "tsv", block_bytes=7000))


def test_empty_and_unknown_and_mixed(tmp_path):
    empty = write(tmp_path, "empty.cov", "")
    with pytest.raises(FormatError, match=r"empty.cov: the file is empty"):
        detect_format(empty)
    header_only = write(tmp_path, "h.tsv", HEADER)
    with pytest.raises(FormatError, match="the file is empty"):
        detect_common_format([header_only])
    unknown = write(tmp_path, "what.txt", "hello world\nfoo bar\n")
    with pytest.raises(FormatError, match=r"what.txt:1: unknown format .*: 'hello world'"):
        detect_format(unknown)
    with pytest.raises(ValueError, match=r"mixed formats in one call.*bismark-cov.*allc"):
        detect_common_format([DATA / "bsseq_bismark.cov.gz", DATA / "ALLCools_Cell01.allc.tsv.gz"])


def test_explicit_format_is_checked():
    with pytest.raises(FormatError, match="malformed allc line"):
        list(read_rows(DATA / "bsseq_modkit_HG002.bed.gz", "allc"))
