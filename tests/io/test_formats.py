import csv
import gzip
from pathlib import Path

import numpy as np
import pytest

from streambhmm.io.formats import FormatError, detect_common_format, detect_format, read_rows
from streambhmm.io.ingest import ingest
from streambhmm.io.store import open_store
from streambhmm.testing import load_counts

from ..conftest import REAL_DATA as REAL

DATA = Path(__file__).parents[1] / "data"


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


@pytest.mark.realdata
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
    ("chr1\t30\t+\t1\t5\nchr1\t20\t+\t1\t5\nchr1\t30\t+\t2\t5\n", 4,
     "repeats the chromosome, position and strand of line 2 ('chr1\\t30\\t+\\t1\\t5')", "chr1\t30\t+\t2\t5"),
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


# --- every methylation call file in shared/data/real, against an independent reader ---

needs_real = pytest.mark.realdata


def csv_rows(path, skip=0):
    """The csv module over gzip: an independent reader of the data lines' fields."""
    with gzip.open(path, "rt", newline="") as fh:
        return [row for row in csv.reader(fh, delimiter="\t") if row][skip:]


def expected_rows(path, skip, convert):
    """(chrom, pos0, meth, cov) of the lines ``convert`` keeps (it returns None to drop one), cov > 0."""
    out = [convert(row) for row in csv_rows(path, skip)]
    return [r for r in out if r is not None and r[3] > 0]


def read_all(path, fmt, context="CG", **options):
    from streambhmm.io.formats import ReadOptions

    columns = options.pop("columns", None)
    opts = ReadOptions(columns=ReadOptions.parse_columns(columns) if columns else None, **options)
    detected = fmt == "auto" and columns is None
    fmt = detect_common_format([path], fmt, opts)
    return [(r.chrom, int(p), int(m), int(c)) for r in read_rows(path, fmt, context, options=opts, detected=detected)
            for p, m, c in zip(r.pos0, r.methylated, r.coverage)]


COMPLEMENT = str.maketrans("ACGTN", "TGCAN")


def bsmap_row(f):
    """BSMAP: the context column is 5 bases of the + strand around the position; read the
    cytosine's own strand to classify it."""
    own = f[3] if f[2] == "+" else f[3][::-1].translate(COMPLEMENT)
    return (f[0], int(f[1]) - 1, int(f[6]), int(f[7])) if own[2:4] == "CG" else None


REAL_CASES = {
    # path under shared/data/real: (--format, options, header lines, independent (chrom, pos0, meth, cov) or None)
    "MethylSeekR_IMR90_chr22/Lister2009_imr90_hg18_chr22.tab.gz":
        ("methylseekr", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[2]))),  # T first
    "methrix_colon_chr21_22/C1.bedGraph.gz": ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[2]),
                                                                        int(f[2]) + int(f[3]))),
    "methrix_colon_chr21_22/N2.bedGraph.gz": ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[2]),
                                                                        int(f[2]) + int(f[3]))),
    "DSS_extdata/cond1_1.txt.gz": ("auto", {}, 1, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[2]))),
    "DSS_extdata/cond2_2.txt.gz": ("auto", {}, 1, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[2]))),
    "biscuiteer_MCF7_chr11p15/MCF7_Cunha_chr11p15.bed.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]), round(float(f[3]) * int(f[4])), int(f[4]))),
    "methimpute_arabidopsis/arabidopsis_bsseeker.txt.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[2]) - 1, int(f[6]), int(f[7])) if f[3] == "CG" else None),
    "methimpute_arabidopsis/arabidopsis_BSMAP.txt.gz": ("auto", {}, 1, bsmap_row),
    "methimpute_arabidopsis/arabidopsis_methylpy.txt.gz":  # 0-based (README: sequence-checked)
        ("allc-0based", {"context": "all"}, 1, lambda f: (f[0], int(f[1]), int(f[4]), int(f[5]))),
    "methimpute_arabidopsis/arabidopsis_rene.txt.gz":
        ("auto", {"columns": "chrom=1,pos=2,strand=3,meth=6,total=8"}, 1,
         lambda f: (f[0], int(f[1]) - 1, int(f[5]), int(f[7]))),
    "methylPipe_H1_IMR90_chr20/H1_chr20_CG_10k_tabix_out.txt.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[4]), int(f[4]) + int(f[5]))),
    "methylPipe_H1_IMR90_chr20/IMR90_chr20_CG_10k_tabix_out.txt.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[4]), int(f[4]) + int(f[5]))),
    "MethCP_arabidopsis/timecourse_GSE94712/GSM2481288_mC_Col-0_DS_r1.tsv.gz":  # 0-based (README)
        ("auto", {"columns": "chrom=1,pos=2,strand=3,meth=4,total=5", "zero_based": True}, 1,
         lambda f: (f[0], int(f[1]), int(f[3]), int(f[4]))),
    "MethCP_arabidopsis/twogroup_H2AZ/treatment3.txt.gz":
        ("auto", {"columns": "chrom=1,pos=2,meth=3,total=4"}, 1, lambda f: (f[0], int(f[1]) - 1, int(f[2]), int(f[3]))),
    "DSS_RRBS_SLE/Sample7.tsv.gz": ("auto", {}, 1, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[4]))),
    "M3D_rrbsDemo_H1_K562/K562-2.chr1.tsv.gz": ("auto", {}, 1, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[4]))),
    "BiSeq_rrbs_APL/APL3_APL.rrbs.tsv.gz": ("auto", {}, 1, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[4]))),
    "BiSeq_rrbs_APL/extdata/CpG_context_test_sample.cov.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[4]), int(f[4]) + int(f[5]))),
    "ALLCools_allc_mm10/Cell05.allc.tsv.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[4]), int(f[5])) if f[3][1] == "G" else None),
    "bsseq_extdata/modbam2bed/tret3.chr10.chr11.bed.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]), int(f[12]), int(f[11]) + int(f[12]))),
    "DMRcaller_arabidopsis_chr3/met1-3.Chr3_1-1Mb.CX_report.txt.gz":
        ("auto", {}, 0, lambda f: (f[0], int(f[1]) - 1, int(f[3]), int(f[3]) + int(f[4])) if f[5] == "CG" else None),
}


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("relative", list(REAL_CASES))
def test_real_file_read_equals_an_independent_reader(relative):
    fmt, options, skip, convert = REAL_CASES[relative]
    path = REAL / relative
    expected = expected_rows(path, skip, convert)
    assert len(expected) > 1
    assert read_all(path, fmt, **options) == expected


@needs_real
@pytest.mark.parametrize("relative,message", [
    # T M or M U: refused unless --format says which (col3 >= col4 on every inspected line)
    ("MethylSeekR_IMR90_chr22/Lister2009_imr90_hg18_chr22.tab.gz", "fit 2 formats: methylseekr .* methrix"),
    # end = start + 1: a 0-based bedGraph (MethylDackel) or a 1-based merged-CpG Bismark .cov
    ("DMCHMM_blood_chr8/blk.BCU1568_BC_BS_1.gz", "fit 2 formats: bismark-cov .* methyldackel"),
    # a methylpy header: 0-based in this file, while headerless allc is 1-based
    ("methimpute_arabidopsis/arabidopsis_methylpy.txt.gz", "fit 2 formats: allc .* allc-0based"),
    # column names that say what the columns hold, but not the coordinate base
    ("MethCP_arabidopsis/timecourse_GSE94712/GSM2481300_mC_rdd_DS_r1.tsv.gz",
     "pass --columns chrom=1,pos=2,strand=3,meth=4,total=5 .*--zero-based"),
    ("MethCP_arabidopsis/twogroup_H2AZ/control1.txt.gz", "pass --columns chrom=1,pos=2,meth=3,total=4 "),
    ("methimpute_arabidopsis/arabidopsis_rene.txt.gz", "pass --columns chrom=1,pos=2,strand=3,context=4,meth=6,total=8 "),
    # not methylation calls
    ("DSS_RRBS_SLE/design.tsv", r"design.tsv:1: unknown format \(no known format has this header line\)"),
    ("MethCP_arabidopsis/timecourse_GSE94712/meta_data.txt.gz", "unknown format"),
])
def test_real_files_that_cannot_be_detected_are_refused_with_what_to_pass(relative, message):
    with pytest.raises(FormatError, match=message) as err:
        detect_format(REAL / relative)
    assert "--format" in str(err.value) or "--columns" in str(err.value)


@needs_real
def test_a_header_of_the_users_own_above_a_known_formats_lines_names_that_format(tmp_path):
    """modkit's own header begins with '#'; a user's plain one above its lines was refused as an
    unknown format with only --columns suggested (a helper's trial), which loses modkit's reading."""
    source = REAL / "modkit_lung_chr20/lung_00733-m_adjacent-normal_5mc-5hmc_chr20_cpg_pileup.bed.gz"
    with gzip.open(source, "rt") as lines:
        rows = [next(lines) for _ in range(50)]
    path = tmp_path / "pileup.bed"
    path.write_text("chrom\tstart\tend\tcode\tscore\tstrand\tstart2\tend2\tcolor\tNvalid\tpercent\tNmod\t"
                    "Ncanonical\tNother_mod\tNdelete\tNfail\tNdiff\tNnocall\n" + "".join(rows))
    with pytest.raises(FormatError, match=r"pileup.bed:1: unknown format \(no known format has this header line, but "
                                          r"the data lines below it fit modkit: .*pass --format modkit if the file is"):
        detect_format(path)
    assert read_all(path, "modkit")  # what it suggests reads the file
    # a header above lines that two formats read differently (methylseekr's T M, methrix's M U, a
    # helper's audit) suggests neither: the header's names say which column is which
    dss = REAL / "DSS_extdata/cond1_1.txt.gz"
    with gzip.open(dss, "rt") as lines:
        rows = [next(lines) for _ in range(51)][1:]
    path.write_text("Chromosome Position Total Meth\n" + "".join(rows))
    with pytest.raises(FormatError, match=r"unknown format \(no known format has this header line\); ") as err:
        detect_format(path)
    assert "--format" not in str(err.value)


@needs_real
def test_real_dmchmm_rows_that_span_many_bases_are_refused_whatever_the_format():
    path = REAL / "DMCHMM_blood_chr8/blk.BCU1568_BC_BS_1.gz"
    rows = csv_rows(path)
    line = next(i for i, f in enumerate(rows, 1) if int(f[2]) - int(f[1]) not in (1, 2))
    read = {}
    for fmt, spec in (("methyldackel", "chrom=1,pos=2,meth=5,unmeth=6 --zero-based"),
                      ("bismark-cov", "chrom=1,pos=2,meth=5,unmeth=6")):
        with pytest.raises(FormatError, match=f"{path}:{line}: end - start is") as err:
            read_all(path, fmt)
        assert err.value.text == "\t".join(rows[line - 1]) and "(format " + fmt + ", given)" in str(err.value)
        # and says how to read each line as the cytosine at its start (a new user's trial)
        assert f"read the file with --columns {spec}: " in str(err.value)
        columns, _, zero_based = spec.partition(" ")
        read[fmt] = read_all(path, "auto", columns=columns, zero_based=bool(zero_based))
        assert len(read[fmt]) == sum(int(f[4]) + int(f[5]) > 0 for f in rows)  # every row with reads
    assert [p - 1 for _, p, _, _ in read["methyldackel"]] == [p for _, p, _, _ in read["bismark-cov"]]  # 0- and 1-based


@pytest.mark.slow
@needs_real
def test_real_methylkit_file_unsorted_within_its_chromosome_reads_as_its_sorted_copy(tmp_path):
    """methylKit writes its files in no position order: they are read as they are, and
    ingest into the same store as a sorted copy."""
    path = REAL / "methylKit_extdata/test1.myCpG.txt.gz"
    rows = csv_rows(path)
    header, body = rows[0], sorted(rows[1:], key=lambda f: (f[1], int(f[2])))
    assert body != rows[1:]  # the file is not sorted
    sorted_path = tmp_path / "test1.sorted.txt.gz"
    with gzip.open(sorted_path, "wt") as fh:
        fh.writelines("\t".join(f) + "\n" for f in [header] + body)
    expected = [(f[1], int(f[2]) - 1, round(int(f[4]) * float(f[5]) / 100), int(f[4])) for f in body]
    assert detect_format(sorted_path) == detect_format(path) == "methylkit"
    assert read_all(sorted_path, "auto") == expected
    assert sorted(read_all(path, "auto")) == expected
    for name, source in (("unsorted", path), ("sorted", sorted_path)):
        ingest([source], "A", tmp_path / f"{name}.zarr", bin_size=50, chunk_size=1000)
    stores = [open_store(tmp_path / f"{name}.zarr") for name in ("unsorted", "sorted")]
    assert stores[0].chromosomes == stores[1].chromosomes
    for mine, theirs in zip(load_counts(stores[0]), load_counts(stores[1])):
        np.testing.assert_array_equal(mine, theirs)
    with pytest.raises(ValueError, match="--context CHH: format methylkit records no cytosine context"):
        read_all(sorted_path, "auto", "CHH")


@pytest.mark.parametrize("fmt, first, line", [
    ("bismark-cov", "chr1\t4\t4\t50\t1\t1\n", "chr1\t10\t10\t{pct}\t32\t1\n"),
    ("methyldackel", "chr1\t3\t4\t50\t1\t1\n", "chr1\t9\t10\t{pct}\t32\t1\n"),
])
def test_a_percent_that_disagrees_with_its_counts_names_the_line(tmp_path, fmt, first, line):
    """A line cut short in its last count still parses; its percent no longer agrees."""
    for pct in ("96.9697", "97", "96"):  # full precision and whole percents (MethylDackel's) agree
        path = write(tmp_path, f"ok{pct}.txt", first + line.format(pct=pct))
        assert sum(r.pos0.size for r in read_rows(path, fmt)) == 2
    path = write(tmp_path, "cut.txt", first + line.format(pct="84.21"))
    with pytest.raises(FormatError) as info:
        list(read_rows(path, fmt))
    assert info.value.line == 2 and "percent 84.21 disagrees with the counts, 32 methylated of 33" in str(info.value)


def test_a_format_given_that_the_first_line_does_not_fit_names_the_formats_that_do(tmp_path):
    """A helper's trial: a wrong --format was refused with the line's fault alone, no format to try."""
    cov = tmp_path / "s.cov"
    cov.write_text("chr1\t10\t10\t75.0\t3\t1\nchr1\t20\t20\t0.0\t0\t2\n")  # Bismark's coverage file
    with pytest.raises(FormatError, match=r"expected 4 fields, found 6; the file fits format bismark-cov instead "
                                          r"\(.*\): pass --format bismark-cov: .*\(format methylseekr, given\)"):
        read_all(cov, "methylseekr")
    four = tmp_path / "s.tsv"
    four.write_text("chr1\t10\t4\t3\nchr1\t20\t2\t0\n")  # T M or M U: the columns alone do not say
    with pytest.raises(FormatError, match=r"found 4; the file fits the formats methylseekr and methrix instead: pass "
                                          r"--format with the one it is"):
        read_all(four, "bismark-cov")
    assert read_all(four, "methylseekr") == [("chr1", 9, 3, 4), ("chr1", 19, 0, 2)]
