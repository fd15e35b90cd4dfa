"""The text-to-rows stage: detection rules, reading options, and the input failures an
audit found (each test here failed before its fix)."""

import gzip
import os
import re
import shutil
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streambhmm.io.formats import FormatError, ReadOptions, detect_common_format, detect_format, read_rows
from streambhmm.io.ingest import ingest
from streambhmm.io.store import natural_sorted, open_store

from .test_ingest import chrom_table, tree_digest

HEADER = "chrom\tpos\tstrand\tmc\tcov\n"


def write(tmp_path, name, text, gz=False):
    data = text.encode() if isinstance(text, str) else text
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def rows_of(path, fmt=None, context="CG", **options):
    opts = ReadOptions(**options)
    fmt = fmt or detect_common_format([path], "auto", opts)
    return [(r.chrom, int(p), int(m), int(c)) for r in read_rows(path, fmt, context, options=opts)
            for p, m, c in zip(r.pos0, r.methylated, r.coverage)]


def error_of(path, fmt=None, context="CG", **options) -> FormatError:
    with pytest.raises(FormatError) as err:
        rows_of(path, fmt, context, **options)
    return err.value


# --- detection ---


@pytest.mark.parametrize("body,fmt", [
    ("chr1\t10\t10\t50\t1\t1\nchr1\t11\t11\t0\t0\t2\n", "bismark-cov"),  # end = start: 1-based single C
    ("chr1\t9\t11\t50\t1\t1\n", "methyldackel"),  # end = start + 2: a merged CpG, 0-based
    ("track type=\"bedGraph\"\nchr1\t9\t10\t50\t1\t1\n", "methyldackel"),
])
def test_bedgraph_and_bismark_cov_are_told_apart_by_content(tmp_path, body, fmt):
    assert detect_format(write(tmp_path, "f.txt", body)) == fmt


def test_a_bismark_cov_behind_a_track_line_is_refused_naming_the_track_line(tmp_path):
    """A track line marks a bedGraph, never a Bismark .cov; a helper's .cov with one added was
    refused as "unknown format" naming its first data line, which is a good .cov line."""
    path = write(tmp_path, "t.cov", "track type=bedGraph\nchr1\t10\t10\t50\t1\t1\nchr1\t11\t11\t0\t0\t2\n")
    with pytest.raises(FormatError, match=r"t.cov:1: unknown format: the data lines fit bismark-cov .* this line "
                                          r"marks a bedGraph.* Pass --format bismark-cov if it is a .cov file with "
                                          r"a track line added: 'track type=bedGraph'"):
        detect_format(path)
    assert rows_of(path, "bismark-cov") == [("chr1", 9, 1, 2), ("chr1", 10, 0, 2)]


def test_methyldackel_without_its_track_line_is_ambiguous_not_shifted(tmp_path):
    path = write(tmp_path, "md.bedGraph", "chr1\t9\t10\t50\t1\t1\nchr1\t10\t11\t100\t2\t0\n")
    with pytest.raises(FormatError, match=r"ambiguous format: .*fit 2 formats: bismark-cov .*methyldackel .*"
                                          r"Pass --format bismark-cov or --format methyldackel; if it is none of "
                                          r"them, describe its columns with --columns chrom=N"):
        detect_format(path)
    assert rows_of(path, "methyldackel") == [("chr1", 9, 1, 2), ("chr1", 10, 2, 2)]  # 0-based start
    assert rows_of(path, "bismark-cov") == [("chr1", 8, 1, 2), ("chr1", 9, 2, 2)]  # merged CpG: 1-based C


@pytest.mark.parametrize("name", ["chr", "chrom", "chromosome", "Chr"])
def test_a_chromosome_named_like_a_header_is_data(tmp_path, name):
    path = write(tmp_path, "c.cov", f"{name}\t10\t10\t50\t1\t1\n{name}\t20\t20\t0\t0\t3\n")
    assert detect_format(path) == "bismark-cov"
    assert rows_of(path) == [(name, 9, 1, 2), (name, 19, 0, 3)]


def test_values_decide_total_first_against_methylated_first(tmp_path):
    tm = write(tmp_path, "tm.txt", "chr1\t10\t5\t3\nchr1\t20\t4\t4\n")  # col3 >= col4 everywhere
    with pytest.raises(FormatError, match="fit 2 formats: methylseekr .* methrix"):
        detect_format(tm)
    assert rows_of(tm, "methylseekr") == [("chr1", 9, 3, 5), ("chr1", 19, 4, 4)]
    mu = write(tmp_path, "mu.txt", "chr1\t10\t5\t3\nchr1\t20\t2\t4\n")  # 2 < 4: col3 cannot be the total
    assert detect_format(mu) == "methrix"  # and 5 > 3: nor can col4 (chr pos M T)
    assert rows_of(mu) == [("chr1", 9, 5, 8), ("chr1", 19, 2, 6)]


def test_a_header_in_quotes_says_how_to_write_it(tmp_path):
    """R's write.table quotes names and strings by default: "no known format has this header
    line" gave no hint (a helper's audit)."""
    err = error_of(write(tmp_path, "q.txt", '"chr"\t"pos"\t"N"\t"X"\n"chr1"\t10\t5\t3\n'))
    assert "its names are in quotes" in str(err)
    assert "quote = FALSE, row.names = FALSE (its header is then format dss's)" in str(err)
    err = error_of(write(tmp_path, "r.txt", '"chrom"\t"position"\t"m"\t"cov"\n"chr1"\t10\t5\t3\n'))
    assert "row.names = FALSE; then, if the header means what it seems to, pass --columns chrom=1,pos=2,meth=3," \
           "total=4" in str(err)


def test_a_methyldackel_file_of_chg_calls_is_not_stored_as_cpgs(tmp_path):
    """MethylDackel writes a bedGraph per context and names it in the track line; its rows
    name none, so a CHG file went in as CpGs under the default --context CG."""
    row = "chr1\t99\t100\t67\t2\t1\n"
    chg = write(tmp_path, "s_CHG.bedGraph", 'track type="bedGraph" description="s CHG methylation levels"\n' + row)
    err = error_of(chg)
    assert err.line == 1 and "the track line says the file holds CHG calls" in str(err) and "--context all" in str(err)
    assert rows_of(chg, context="all") == [("chr1", 99, 2, 3)]
    cpg = write(tmp_path, "CHH-study_CpG.bedGraph",  # the prefix is the user's: only the context is read
                'track type="bedGraph" description="CHH-study CpG methylation levels"\n' + row)
    assert rows_of(cpg) == [("chr1", 99, 2, 3)]


def test_biscuit_mergecg_output_is_read_by_its_merged_beta_and_coverage(tmp_path):
    """biscuit mergecg adds each strand's base, beta and coverage in a sixth column: the file
    was refused (unknown format; with --format biscuit, 6 fields where 5 were expected)."""
    path = write(tmp_path, "m.bed", "chr1\t1222700\t1222702\t0.901\t10\tC:0.670:3,G:1.000:7\n"
                                    "chr1\t1222800\t1222802\t0.500\t4\tC:0.500:4\n")
    assert detect_format(path) == "biscuit"
    assert rows_of(path) == [("chr1", 1222700, 9, 10), ("chr1", 1222800, 2, 4)]
    bad = write(tmp_path, "n.bed", "chr1\t1222700\t1222702\t0.901\t10\tnotes\n")  # a sixth column of another kind
    with pytest.raises(FormatError, match="unknown format"):
        detect_format(bad)


@pytest.mark.parametrize("text, fits, columns", [
    # chr pos M T (MethCP's Chr Pos M Cov, an awk export) was read as methrix: T stored as U, coverage M + T
    ("chr1\t100\t3\t10\nchr1\t150\t5\t5\nchr1\t300\t0\t8\n", "methrix", "chrom=1,pos=2,meth=3,total=4"),
    # a count BED (methylated reads in column 4) of 0s and 1s was read as BISCUIT betas: 1 of 5 became 5 of 5
    ("chr1\t99\t100\t1\t5\nchr1\t150\t151\t0\t3\n", "biscuit", "chrom=1,pos=2,meth=4,total=5 --zero-based"),
])
def test_a_file_that_fits_one_format_and_a_count_file_alike_is_ambiguous(tmp_path, text, fits, columns):
    path = write(tmp_path, "counts.txt", text)
    with pytest.raises(FormatError, match=f"ambiguous format: the first [23] data lines fit {fits} .* Pass "
                                          f"--format {fits}, or --columns {re.escape(columns)} if the file holds"):
        detect_format(path)
    # what the format's own files hold is detected as before: a beta with its decimals, M above and below U
    assert detect_format(write(tmp_path, "b.bed", "chr1\t99\t100\t1.000\t5\nchr1\t150\t151\t0.000\t3\n")) == "biscuit"
    # a line beyond the first 100 tells them apart too (a methrix file that begins with unmethylated CpGs)
    if fits == "methrix":
        later = text + "".join(f"chr1\t{1000 + k}\t0\t4\n" for k in range(200)) + "chr1\t2000\t5\t1\n"
    else:
        later = text + "".join(f"chr1\t{1000 + k}\t{1001 + k}\t0\t4\n" for k in range(200)) + \
            "chr1\t2000\t2001\t0.500\t4\n"
    assert detect_format(write(tmp_path, "later.txt", later)) == fits


def test_a_bom_before_the_header_is_accepted(tmp_path):
    path = write(tmp_path, "bom.tsv", "\ufeff" + HEADER + "chr1\t10\t+\t1\t5\n")
    assert detect_format(path) == "tsv"
    assert rows_of(path) == [("chr1", 9, 1, 5)]


def test_methylpipe_is_no_longer_read_as_allc(tmp_path):
    # chrom pos strand context nC nT score: read as allc, cov was the score
    path = write(tmp_path, "mp.txt", "chr20\t8179\t+\tCG\t2\t4\t20\nchr20\t8180\t-\tCG\t4\t4\t48\n")
    assert detect_format(path) == "methylpipe"
    assert rows_of(path) == [("chr20", 8178, 2, 6), ("chr20", 8179, 4, 8)]


def test_the_header_of_another_format_is_refused(tmp_path):
    path = write(tmp_path, "dss.txt", "chr\tpos\tN\tX\nchr1\t10\t5\t3\n")
    assert rows_of(path) == [("chr1", 9, 3, 5)]
    with pytest.raises(FormatError, match="this is the header line of format dss, not methrix"):
        rows_of(path, "methrix")


def test_unknown_files_are_told_about_columns(tmp_path):
    path = write(tmp_path, "x.txt", "chr1\t10\t+\t3\t5\n")
    with pytest.raises(FormatError, match=r"x.txt:1: unknown format .*--columns chrom=N"):
        detect_format(path)
    assert rows_of(path, columns=ReadOptions.parse_columns("chrom=1,pos=2,meth=4,total=5,strand=3")) == \
        [("chr1", 9, 3, 5)]
    assert rows_of(path, columns=ReadOptions.parse_columns("chrom=1,pos=2,meth=4,unmeth=5"),
                   zero_based=True) == [("chr1", 10, 3, 8)]


def test_columns_may_name_a_context_column(tmp_path):
    """context=N reads a context (CG, CHG, CHH) or a C and its two next bases, and --context
    picks the rows (a new user's trial: without it methimpute's CHH rows were read as CpGs)."""
    path = write(tmp_path, "x.txt", "chr1\t10\tCGA\t3\t5\nchr1\t20\tCTG\t1\t5\nchr1\t30\tCCT\t2\t5\n"
                                    "chr1\t40\tCG\t4\t5\nchr1\t50\tCHG\t1\t6\nchr1\t60\tCHH\t2\t6\n")
    columns = ReadOptions.parse_columns("chrom=1,pos=2,context=3,meth=4,total=5")
    assert rows_of(path, columns=columns) == [("chr1", 9, 3, 5), ("chr1", 39, 4, 5)]
    assert rows_of(path, context="CHG", columns=columns) == [("chr1", 19, 1, 5), ("chr1", 49, 1, 6)]
    assert rows_of(path, context="CHH", columns=columns) == [("chr1", 29, 2, 5), ("chr1", 59, 2, 6)]
    assert len(rows_of(path, context="all", columns=columns)) == 6
    bad = write(tmp_path, "bad.txt", "chr1\t10\tCGA\t3\t5\nchr1\t20\tZ\t1\t5\n")
    err = error_of(bad, columns=columns)
    assert err.line == 2 and "context 'Z' (expected CG, CHG, CHH, or a C and two bases" in str(err)
    # a header that names it: the hint passes it on
    header = write(tmp_path, "h.txt", "chr\tpos\tcontext\tm\tcov\nchr1\t10\tCG\t3\t5\n")
    with pytest.raises(FormatError, match="pass --columns chrom=1,pos=2,context=3,meth=4,total=5 "):
        detect_format(header)


def test_a_context_in_lower_case_reads_as_in_upper_case(tmp_path):
    """Soft-masked bases (repeats, in lower case) name the same contexts."""
    upper = "chr1\t10\tCGA\t3\t5\nchr1\t20\tCTG\t1\t5\nchr1\t30\tCCT\t2\t5\nchr1\t40\tCG\t4\t5\n"
    columns = ReadOptions.parse_columns("chrom=1,pos=2,context=3,meth=4,total=5")
    lower = write(tmp_path, "lower.txt", upper.lower())
    mixed = write(tmp_path, "mixed.txt", upper.replace("CGA", "cGa").replace("CTG", "ctG"))
    for context in ("CG", "CHG", "CHH"):
        expected = rows_of(write(tmp_path, "upper.txt", upper), context=context, columns=columns)
        assert expected and rows_of(lower, context=context, columns=columns) == expected
        assert rows_of(mixed, context=context, columns=columns) == expected
    # and the named formats are detected with them
    report = write(tmp_path, "r.txt", "chr1\t101\t+\t3\t1\tcg\tcgt\nchr1\t201\t+\t1\t1\tCHH\tCAT\n")
    assert detect_format(report) == "bismark-report" and rows_of(report) == [("chr1", 100, 3, 4)]
    allc = write(tmp_path, "a.tsv", "chr1\t101\t+\tcgt\t3\t4\t1\nchr1\t201\t+\tcat\t1\t2\t1\n")
    assert detect_format(allc) == "allc" and rows_of(allc) == [("chr1", 100, 3, 4)]
    cgmap = write(tmp_path, "c.CGmap", "chr1\tc\t101\tcg\tcg\t0.75\t3\t4\nchr1\tg\t102\tCG\tCG\t0.5\t1\t2\n")
    assert detect_format(cgmap) == "cgmap" and rows_of(cgmap) == [("chr1", 100, 3, 4), ("chr1", 101, 1, 2)]


def test_a_bsmap_context_is_five_bases(tmp_path):
    head = "chr\tpos\tstrand\tcontext\tratio\teff_CT_count\tC_count\tCT_count\trev_G_count\trev_GA_count\n"
    good = write(tmp_path, "good.txt", head + "chr1\t101\t+\ttacga\t0.75\t4\t3\t4\t0\t0\n")
    assert rows_of(good) == [("chr1", 100, 3, 4)]
    bad = write(tmp_path, "bad.txt", head + "chr1\t101\t+\ttacga\t0.75\t4\t3\t4\t0\t0\n"
                                           "chr1\t201\t+\txxCG!\t0.75\t4\t3\t4\t0\t0\n")
    err = error_of(bad, context="all")
    assert err.line == 3 and "context 'xxCG!' (expected 5 bases (ACGTN) centred on the C" in str(err)


@pytest.mark.parametrize("spec,message", [
    ("chrom=1,pos=2,meth=4", "one of total or unmeth"),
    ("chrom=1,pos=2,meth=4,total=5,unmeth=6", "one of total or unmeth"),
    ("chrom=1,pos=2,meth=2,total=5", "share a column"),
    ("chrom=1,pos=0,meth=4,total=5", "column number from 1"),
    ("chrom=1,place=2,meth=4,total=5", "'place=2' is not ROLE=N"),
])
def test_columns_spec_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        ReadOptions.parse_columns(spec)


def test_columns_options_belong_to_columns(tmp_path):
    with pytest.raises(ValueError, match="--zero-based and --header describe a --columns file"):
        ReadOptions(zero_based=True)
    path = write(tmp_path, "x.txt", "chr1\t10\t3\t5\n")
    with pytest.raises(ValueError, match="names column 9, but the first data line has 4 fields"):
        rows_of(path, columns=ReadOptions.parse_columns("chrom=1,pos=2,meth=9,total=3"))
    with pytest.raises(ValueError, match="cannot be combined with --format methrix"):
        detect_common_format([path], "methrix", ReadOptions(columns=ReadOptions.parse_columns(
            "chrom=1,pos=2,meth=3,total=4")))


def test_header_option_skips_a_first_line_that_looks_like_data(tmp_path):
    path = write(tmp_path, "h.txt", "1\t2\t3\t4\nchr1\t10\t3\t5\n")
    columns = ReadOptions.parse_columns("chrom=1,pos=2,meth=3,total=4")
    assert rows_of(path, columns=columns, header=True) == [("chr1", 9, 3, 5)]
    assert rows_of(path, columns=columns) == [("1", 1, 3, 4), ("chr1", 9, 3, 5)]


def test_a_context_cannot_be_asked_of_a_format_without_one(tmp_path):
    path = write(tmp_path, "c.cov", "chr1\t10\t10\t50\t1\t1\n")
    assert rows_of(path, context="CG") == rows_of(path, context="all") == [("chr1", 9, 1, 2)]
    with pytest.raises(ValueError, match="--context CHH: format bismark-cov records no cytosine context"):
        rows_of(path, context="CHH")


# --- options ---


CX = ("chr1\t100\t+\t3\t1\tCG\tCGA\n"
      "chr1\t101\t-\t2\t2\tCG\tCGT\n"
      "chr1\t103\t-\t1\t0\tCHG\tCTG\n"
      "chr1\t200\t-\t5\t0\tCG\tCGG\n"  # a minus C whose plus partner (199) has no row
      "chr2\t1\t+\t0\t7\tCG\tCGA\n"
      "chr2\t2\t-\t1\t1\tCG\tCGA\n")


def test_merge_strands_moves_minus_cpg_cs_onto_their_plus_partner(tmp_path):
    path = write(tmp_path, "cx.txt", CX)
    plain = rows_of(path, context="all")
    merged = rows_of(path, context="all", merge_strands=True)
    assert [r[1] for r in plain] == [99, 100, 102, 199, 0, 1]
    assert [r[1] for r in merged] == [99, 99, 102, 198, 0, 0]  # CHG rows stay where they are
    assert [r[2:] for r in merged] == [r[2:] for r in plain]
    store = tmp_path / "s.zarr"
    ingest([path], "A", store, bin_size=1, options=ReadOptions(merge_strands=True))
    assert chrom_table(store, "chr1") == ([99, 198], [[5], [5]], [[8], [5]])
    assert chrom_table(store, "chr2") == ([0], [[1]], [[9]])


@pytest.mark.slow  # the command line
def test_ingest_says_which_rows_it_left_out_and_why(tmp_path):
    """A Bismark CX report lists every cytosine: rows of other contexts and rows without reads
    are left out, and ingest says how many of each (the rows it names are those it kept)."""
    from ..app.test_cli import run

    path = write(tmp_path, "cx.txt", CX + "chr2\t5\t+\t0\t0\tCG\tCGA\nchr2\t9\t+\t0\t0\tCHH\tCAA\n")
    report = ingest([path], "A", tmp_path / "a.zarr", bin_size=1, fmt="bismark-report")
    left = report.left_out
    assert (report.n_rows, left.without_reads, left.other_context, left.other_code) == (5, 1, 2, 0)
    r = run("ingest", path, "--sample", "B", "--store", tmp_path / "b.zarr", "--format", "bismark-report",
            "--min-coverage", "3")
    assert r.exit_code == 0, r.output
    assert ("; left out: 1 row without reads, 2 rows of other contexts than CG, 1 row with fewer than "
            "--min-coverage 3 reads") in r.output, r.output


@pytest.mark.parametrize("name, data, what", [
    # how bzip2 and xz data begin (not compressed here: Python may be built without bz2 or lzma)
    ("c.tsv.bz2", b"BZh91AY&SY" + bytes(20), "bzip2 data: decompress it (bunzip2 -k FILE)"),
    ("c.tsv.xz", b"\xfd7zXZ\x00" + bytes(20), "xz data: decompress it (xz -dk FILE)"),
    ("c.tsv.zst", b"\x28\xb5\x2f\xfd" + bytes(20), "zstd data"),
    ("c.zip", b"PK\x03\x04" + bytes(20), "a zip archive"),
    ("c.bam", gzip.compress(b"BAM\x01" + bytes(20), mtime=0), "a BAM file of aligned reads: call methylation first"),
    ("c.tsv", b"\x7fELF\x02\x01" + bytes(20), "an executable program"),
])
def test_a_file_of_another_compression_or_kind_says_what_it_is(tmp_path, name, data, what):
    """Read as text, these failed with advice about carriage returns."""
    path = write(tmp_path, name, data)
    with pytest.raises(FormatError, match=rf"{name}: is not a text or gzip file: it is {re.escape(what)}"):
        ingest([path], "A", tmp_path / "s.zarr")
    assert not list(p.name for p in tmp_path.iterdir() if p.name != name)  # no store, no lock file


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_text_is_refused_saying_to_convert_it(tmp_path, encoding):
    """Read as UTF-8, a UTF-16 file's first field was "not a number: '\\x00c\\x00h...'", and a
    UTF-16 sample sheet "had no column sample"."""
    from streambhmm.app.sheet import read_sheet

    path = write(tmp_path, "c.tsv", "chr1\t100\t+\t1\t2\n".encode(encoding))
    with pytest.raises(FormatError, match=r"c.tsv:1: is UTF-16 text .* convert it to UTF-8 \(iconv -f UTF-16"):
        ingest([path], "A", tmp_path / "s.zarr")
    sheet = write(tmp_path, "sheet.tsv", "sample\tgroup\nA1\tA\nB1\tB\n".encode(encoding))
    with pytest.raises(FormatError, match="sheet.tsv:1: is UTF-16 text"):
        read_sheet(sheet)
    assert rows_of(write(tmp_path, "a.tsv", "chr1\t100\t+\t1\t2\n"), "tsv") == [("chr1", 99, 1, 2)]


@pytest.mark.parametrize("data", [bytes(4096), bytes(64) + b"chr1\t100\t+\t1\t2\n",
                                  "chr1\t100\t+\t1\t2\n".encode("utf-32"), "chr1\t100\t+\t1\t2\n".encode("utf-32-le"),
                                  "\u00ff\u00fechr1\t100\t+\t1\t2\n".encode("latin-1")])
def test_files_of_nuls_utf32_or_latin1_are_not_called_utf16(tmp_path, data):
    """An audit's file of NULs, UTF-32 and a Latin-1 name beginning with the bytes FF FE were
    called UTF-16 (with advice that garbles UTF-32)."""
    path = write(tmp_path, "c.tsv", data)
    with pytest.raises(FormatError) as err:
        ingest([path], "A", tmp_path / "s.zarr", fmt="tsv")
    assert "UTF-16" not in str(err.value)


def test_text_that_begins_like_a_compressed_file_is_read_as_text(tmp_path):
    path = write(tmp_path, "c.txt", "BZh1\t100\t+\t1\t2\tCG\tCGA\n")  # a chromosome named BZh1
    assert rows_of(path, "bismark-report") == [("BZh1", 99, 1, 3)]


def test_the_line_of_damage_counts_a_member_that_ends_a_byte_before_a_read(tmp_path, monkeypatch):
    from streambhmm.io import blocks

    first = gzip.compress("".join(f"chr1\t{i}\t+\t1\t2\n" for i in range(1, 101)).encode())
    second = gzip.compress("".join(f"chr1\t{i}\t+\t1\t2\n" for i in range(101, 3001)).encode())
    path = write(tmp_path, "two.tsv.gz", first + second[:len(second) // 2])
    monkeypatch.setattr(blocks, "PIECE", len(first) + 1)  # the first read ends a byte into the second member
    whole = 100 + zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(second[:len(second) // 2]).count(b"\n")
    assert blocks._lines_before_damage(path) == whole > 1000


def test_a_directory_that_is_no_store_is_refused_without_a_lock_file_beside_it(tmp_path):
    (tmp_path / "mine").mkdir()
    path = write(tmp_path, "c.tsv", "chrom\tpos\tstrand\tmc\tcov\nchr1\t10\t+\t1\t2\n")
    with pytest.raises(ValueError, match="mine: no counts store here"):
        ingest([path], "A", tmp_path / "mine")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tsv", "mine"]


def test_merge_strands_needs_a_strand(tmp_path):
    cov = write(tmp_path, "c.cov", "chr1\t10\t10\t50\t1\t1\n")
    with pytest.raises(ValueError, match="--merge-strands: format bismark-cov has one row per cytosine but no "
                                         "strand column"):
        rows_of(cov, merge_strands=True)
    tsv = write(tmp_path, "t.tsv", HEADER + "chr1\t10\t+\t1\t2\nchr1\t11\t-\t1\t1\nchr1\t30\t*\t4\t4\n")
    assert rows_of(tsv, merge_strands=True) == [("chr1", 9, 1, 2), ("chr1", 9, 1, 1), ("chr1", 29, 4, 4)]
    seekr = write(tmp_path, "s.tab", "chr1\t10\t5\t3\n")  # one row per CpG already: nothing to move
    assert rows_of(seekr, "methylseekr", merge_strands=True) == [("chr1", 9, 3, 5)]


def test_min_coverage_and_chromosome_filters(tmp_path):
    body = "".join(f"{c}\t{p}\t+\t1\t{v}\n" for c, p, v in [
        ("chr1", 10, 1), ("chr1", 20, 5), ("chrM", 5, 9), ("chrUn_gl1", 3, 9), ("chrUn_gl2", 3, 2),
        ("lambda", 1, 7), ("chrX", 4, 3)])
    path = write(tmp_path, "f.tsv", HEADER + body)
    assert [r[0] for r in rows_of(path, min_coverage=3)] == ["chr1", "chrM", "chrUn_gl1", "lambda", "chrX"]
    assert [r[0] for r in rows_of(path, exclude_chromosomes=("chrM", "chrUn*", "lambda"))] == \
        ["chr1", "chr1", "chrX"]
    assert [r[0] for r in rows_of(path, chromosomes=("chr?", "chr[0-9]*"), exclude_chromosomes=("chrX",))] == \
        ["chr1", "chr1", "chrM"]


def test_ingest_says_which_chromosomes_it_left_out_and_which_patterns_matched_none(tmp_path):
    """A helper's --exclude-chromosomes 'MT,Lambda' kept chrM and lambda without a word, and
    patterns that did match were said nowhere."""
    from ..app.test_cli import run

    body = "".join(f"{c}\t{p}\t+\t1\t{v}\n" for c, p, v in [
        ("chr1", 10, 1), ("chr1", 20, 5), ("chrM", 5, 9), ("chrM", 9, 9), ("lambda", 1, 7), ("chrX", 4, 3)])
    path = write(tmp_path, "f.tsv", HEADER + body)
    said = []
    report = ingest([path], "A", tmp_path / "a.zarr", options=ReadOptions(exclude_chromosomes=("chrM", "lambda")),
                    echo=said.append)
    assert report.left_out.not_selected == {"chrM": 2, "lambda": 1} and not said
    assert report.left_out.said("CG", 1) == "3 rows of 2 chromosomes not selected (chrM, lambda)"
    report = ingest([path], "A", tmp_path / "b.zarr", options=ReadOptions(exclude_chromosomes=("MT", "Lambda", "chrX")),
                    echo=said.append)
    assert said == ["warning: sample A: --exclude-chromosomes MT, Lambda matched no chromosome of the files (their "
                    "chromosomes: chrM, lambda, chr1, chrX; patterns match these names exactly, case too)"]
    assert open_store(tmp_path / "b.zarr").chromosomes == ["chr1", "chrM", "lambda"]
    r = run("ingest", path, "--sample", "A", "--store", tmp_path / "c.zarr", "--chromosomes", "chr1,chr9")
    assert r.exit_code == 0, r.output
    assert "warning: sample A: --chromosomes chr9 matched no chromosome of the files" in r.output
    assert "; left out: 4 rows of 3 chromosomes not selected (chrM, lambda, chrX)" in r.output
    # a chromosome selected whose every row is left out (no reads, --min-coverage) is in the files all the same
    said.clear()
    ingest([path], "A", tmp_path / "d.zarr", options=ReadOptions(chromosomes=("chr1", "chrX"), min_coverage=4),
           echo=said.append)
    assert not said and open_store(tmp_path / "d.zarr").chromosomes == ["chr1"]
    # patterns match the names after --chromosome-names, and the warning says so
    ensembl = write(tmp_path, "e.tsv", HEADER + "1\t10\t+\t1\t5\nMT\t5\t+\t1\t9\n")
    ingest([ensembl], "A", tmp_path / "e.zarr", options=ReadOptions(chromosome_names="ucsc",
                                                                      exclude_chromosomes=("MT",)), echo=said.append)
    assert said == ["warning: sample A: --exclude-chromosomes MT matched no chromosome of the files (their chromosomes "
                    "after --chromosome-names ucsc: chrM, chr1; patterns match these names exactly, case too)"]


def test_ingest_notes_a_chromosome_read_far_deeper_than_the_rest(tmp_path):
    """A helper's chrM at 5,000 reads per CpG (14% of the reads) moved EM's unmethylated state
    from 0.08 to 0.05, unsaid; chromosomes of like depth are not noted."""
    rows = [("chr1", p, 10) for p in range(100, 40_000, 100)] + [("chr2", p, 14) for p in range(100, 20_000, 100)]
    deep = [("chrM", p, 3_000) for p in range(100, 1_700, 100)]
    said = {}
    for name, extra in (("even", []), ("mito", deep)):
        path = write(tmp_path, f"{name}.tsv", HEADER + "".join(f"{c}\t{p}\t+\t1\t{v}\n" for c, p, v in rows + extra))
        said[name] = []
        ingest([path], "A", tmp_path / f"{name}.zarr", echo=said[name].append)
    assert said["even"] == []
    assert said["mito"] == ["note: sample A: chrM (3,000 reads per covered bin; 87.6% of the reads) is read far "
                            "deeper than most of the sample's bins (10.0 reads per covered bin): a mitochondrion or "
                            "a spike-in? A fit by EM (fit --method em, --polish-em, dmr) leans on such bins, whose "
                            "likelihoods sharpen with their reads; to leave them out, ingest (or batch) again with "
                            "--exclude-chromosomes chrM"]
    # two deep chromosomes do not hide each other (an audit's lambda, beside a deeper chrM, was not noted)
    lam = [("lambda", p, 400) for p in range(100, 4_000, 100)]
    path = write(tmp_path, "two.tsv", HEADER + "".join(f"{c}\t{p}\t+\t1\t{v}\n" for c, p, v in rows + deep + lam))
    said["two"] = []
    ingest([path], "A", tmp_path / "two.zarr", echo=said["two"].append)
    assert "note: sample A: chrM (3,000 reads per covered bin; 68.2% of the reads), lambda (400 reads per covered " \
           "bin; 22.2% of the reads) are read far deeper" in said["two"][0]
    # and info says so under its coverage summary, whose mean coverage counts chrM
    from ..app.test_cli import run

    r = run("info", tmp_path / "mito.zarr")
    assert r.exit_code == 0 and r.output.endswith(f"\nnote: {said['mito'][0][len('note: '):]}\n"), r.output
    assert "note:" not in run("info", tmp_path / "even.zarr").output


def test_options_are_recorded_and_a_change_reingests(tmp_path):
    path = write(tmp_path, "f.tsv", HEADER + "chr1\t10\t+\t1\t1\nchr1\t20\t+\t2\t4\nchrM\t5\t+\t1\t9\n")
    store = tmp_path / "s.zarr"
    options = ReadOptions(min_coverage=2, exclude_chromosomes=("chrM",))
    assert ingest([path], "A", store, options=options).below_min_coverage == 1  # chrM's row is excluded, not low
    recorded = open_store(store).attrs["samples"]["A"]["options"]
    assert recorded == {"merge_strands": False, "min_coverage": 2, "chromosomes": None,
                        "exclude_chromosomes": ["chrM"], "columns": None, "zero_based": False, "header": False}
    assert chrom_table(store, "chr1") == ([0], [[2]], [[4]]) and open_store(store).chromosomes == ["chr1"]
    assert ingest([path], "A", store, options=options).unchanged
    report = ingest([path], "A", store, options=ReadOptions(min_coverage=1))
    assert report.replaced and chrom_table(store, "chr1") == ([0], [[3]], [[5]]) and report.below_min_coverage == 0


# --- audit findings ---


@pytest.mark.parametrize("value,message", [
    ("4294967296", "count 4294967296 too large (the store holds counts up to 4,294,967,295)"),
    ("9007199254740993", "count 9007199254740993 too large"),  # beyond float64's integers
    ("9223372036854775808", "field 5 ('9223372036854775808'): too large"),  # 2^63
    ("1e30", "field 5 ('1e30'): not an integer"),
    ("inf", "field 5 ('inf'): not an integer"),
    ("-1", "negative count -1"),
])
def test_counts_are_integers_that_fit_the_store(tmp_path, value, message):
    path = write(tmp_path, "big.tsv", HEADER + "chr1\t5\t+\t0\t1\n" + f"chr1\t10\t+\t0\t{value}\n")
    err = error_of(path)
    assert (err.line, err.text) == (3, f"chr1\t10\t+\t0\t{value}") and message in str(err)


def test_methylated_above_coverage_is_seen_at_any_size(tmp_path):
    path = write(tmp_path, "m.tsv", HEADER + "chr1\t10\t+\t4294967295\t4294967294\n")
    assert "methylated count 4294967295 exceeds coverage 4294967294" in str(error_of(path))
    cov = write(tmp_path, "c.cov", "chr1\t10\t10\t50\t4294967295\t1\n")
    assert "coverage 4294967296 too large" in str(error_of(cov))


def test_a_bin_whose_sum_overflows_the_store_is_refused(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([write(tmp_path, "a.tsv", HEADER + "chr1\t10\t+\t1\t2\n")], "A", store)
    before = tree_digest(store)
    path = write(tmp_path, "b.tsv", HEADER + "chr1\t10\t+\t0\t3000000000\nchr1\t11\t+\t0\t3000000000\n")
    with pytest.raises(ValueError, match="chr1: the bin at 0 sums coverage 6,000,000,000, more than the store's"):
        ingest([path], "B", store)
    assert tree_digest(store) == before


def test_the_same_file_twice_is_refused(tmp_path):
    path = write(tmp_path, "a.tsv", HEADER + "chr1\t10\t+\t1\t2\n")
    copy = tmp_path / "copy.tsv"
    shutil.copy(path, copy)
    link = tmp_path / "link.tsv"
    link.symlink_to(path)
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match="link.tsv is the same file as .*a.tsv: each replicate must be given once"):
        ingest([path, link], "A", store)
    with pytest.raises(ValueError, match="copy.tsv has the same content .* as .*a.tsv"):
        ingest([path, copy], "A", store)
    assert not store.exists()


@pytest.mark.parametrize("name,fmt,body,line,earlier", [
    ("t.tsv", "tsv", HEADER + "chr1\t10\t+\t1\t2\nchr1\t11\t-\t1\t2\nchr1\t11\t-\t3\t4\n", 4, 3),
    ("t.tsv", "tsv", HEADER + "chr1\t10\t+\t1\t2\nchr1\t10\t-\t1\t2\n\nchr1\t10\t+\t1\t2\n", 5, 2),
    ("b.bed", "biscuit", "chr1\t10\t12\t0.5\t4\nchr1\t20\t22\t0.5\t4\nchr1\t20\t22\t0.25\t4\n", 3, 2),
    ("cx.txt", "bismark-report", "Chr3\t101\t+\t0\t1\tCHH\tCCC\nChr3\t102\t+\t1\t1\tCG\tCGT\n"
                                 "Chr3\t102\t+\t1\t1\tCG\tCGT\n", 3, 2),
    ("c.cov", "bismark-cov", "chr1\t10\t10\t50\t1\t1\nchr1\t10\t10\t50\t1\t1\n", 2, 1),
    ("m.bed", "modkit", "chr1\t10\t11\tm\t5\t+\t10\t11\t0,0,0\t5\t20.0\t1\t4\t0\t0\t0\t0\t0\n"
                        "chr1\t10\t11\th\t5\t+\t10\t11\t0,0,0\t5\t20.0\t1\t4\t0\t0\t0\t0\t0\n"
                        "chr1\t10\t11\tm\t5\t+\t10\t11\t0,0,0\t5\t20.0\t1\t4\t0\t0\t0\t0\t0\n", 3, 1),
])
@pytest.mark.parametrize("gz", [False, True])
def test_a_repeated_row_is_refused_naming_both_lines(tmp_path, name, fmt, body, line, earlier, gz):
    """A row repeated in a file (chromosome, position and strand) would be summed twice."""
    path = write(tmp_path, name, body, gz)
    err = error_of(path, fmt)
    shown = body.splitlines()[earlier - 1]
    assert err.line == line and err.text == body.splitlines()[line - 1]
    assert f"line {earlier} ({shown!r})" in err.message and "its counts would be summed twice" in err.message
    store = tmp_path / "s.zarr"
    with pytest.raises(FormatError, match=f"{name}:{line}: repeats the chromosome"):
        ingest([path], "A", store, fmt=fmt)
    assert not store.exists()


def test_rows_that_differ_in_strand_or_are_not_kept_are_no_repeat(tmp_path):
    tsv = write(tmp_path, "t.tsv", HEADER + "chr1\t10\t+\t1\t2\nchr1\t10\t-\t1\t3\nchr2\t10\t+\t1\t2\n")
    assert rows_of(tsv) == [("chr1", 9, 1, 2), ("chr1", 9, 1, 3), ("chr2", 9, 1, 2)]
    # modkit's 5hmC row (code h) at the 5mC row's position is not read; a CHH row is not kept with --context CG
    modkit = write(tmp_path, "m.bed", "chr1\t10\t11\tm\t5\t+\t10\t11\t0,0,0\t5\t20.0\t1\t4\t0\t0\t0\t0\t0\n"
                                     "chr1\t10\t11\th\t5\t+\t10\t11\t0,0,0\t5\t20.0\t1\t4\t0\t0\t0\t0\t0\n")
    assert rows_of(modkit, "modkit") == [("chr1", 10, 1, 5)]
    cx = write(tmp_path, "cx.txt", "Chr3\t101\t+\t0\t1\tCHH\tCCC\nChr3\t101\t+\t0\t1\tCHH\tCCC\n"
                                   "Chr3\t102\t+\t1\t1\tCG\tCGT\n")
    assert rows_of(cx, "bismark-report") == [("Chr3", 101, 1, 2)]
    assert error_of(cx, "bismark-report", context="all").line == 2


@pytest.mark.parametrize("seed", range(6))
def test_the_first_repeat_is_found_among_equal_positions_whatever_the_blocks(tmp_path, seed):
    """Many rows share a position (three strands); the first row whose chromosome,
    position and strand came before is named, with the line it repeats, for any blocking."""
    rng = np.random.default_rng(seed)
    keys = []
    for chrom in ("chr1", "chr2"):
        for pos in np.cumsum(rng.integers(0, 3, 150)) + 1:  # 0: the same position again
            keys.append((chrom, int(pos), str(rng.choice(["+", "-", "."]))))
    body = HEADER + "".join(f"{c}\t{p}\t{s}\t1\t{i % 5 + 1}\n" for i, (c, p, s) in enumerate(keys))
    path = write(tmp_path, f"r{seed}.tsv", body)
    seen, expected = {}, None
    for i, key in enumerate(keys):
        if key in seen:
            expected = (i + 2, seen[key] + 2)
            break
        seen[key] = i
    assert expected is not None
    for block_bytes in (40, 333, 1 << 20):
        with pytest.raises(FormatError) as err:
            list(read_rows(path, "tsv", block_bytes=block_bytes))
        assert err.value.line == expected[0] and f"of line {expected[1]} (" in err.value.message


def test_a_gzipped_copy_of_a_replicate_is_refused(tmp_path):
    """The duplicate check compares the decompressed content, not the bytes on disk."""
    body = HEADER + "".join(f"chr1\t{10 + 2 * i}\t+\t1\t2\n" for i in range(50))
    plain = write(tmp_path, "a.tsv", body)
    packed = tmp_path / "a.tsv.gz"
    packed.write_bytes(gzip.compress(body.encode(), compresslevel=9))
    fast = tmp_path / "b.tsv.gz"
    fast.write_bytes(gzip.compress(body.encode(), compresslevel=1))
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match="a.tsv.gz has the same content .* as .*a.tsv: each replicate must be "
                                         "given once"):
        ingest([plain, packed], "A", store)
    with pytest.raises(ValueError, match="b.tsv.gz has the same content .* as .*a.tsv.gz"):
        ingest([packed, fast], "A", store)
    # nor do its line ends (an audit summed a Windows copy, and one without its final newline)
    windows = write(tmp_path, "windows.tsv", "")
    windows.write_bytes(body.replace("\n", "\r\n").encode())
    unended = write(tmp_path, "unended.tsv", body[:-1])
    for copy in (windows, unended):
        with pytest.raises(ValueError, match=f"{copy.name} has the same content .* as .*a.tsv"):
            ingest([plain, copy], "A", store)
    assert not store.exists()
    different = write(tmp_path, "other.tsv", body.replace("\t1\t2\n", "\t2\t2\n", 1))
    assert ingest([plain, different], "A", store).n_rows == 100  # a replicate of its own is read


def test_replicates_that_share_their_first_mib_but_differ_later_are_summed(tmp_path):
    start = HEADER + "".join(f"chr1\t{10 + 2 * i}\t+\t1\t2\n" for i in range(80_000))  # > 1 MiB
    assert len(start) > 1 << 20
    a = write(tmp_path, "a.tsv", start + "chr2\t5\t+\t1\t1\n")
    b = write(tmp_path, "b.tsv.gz", start + "chr2\t5\t+\t0\t1\n", gz=True)
    report = ingest([a, b], "A", tmp_path / "s.zarr", bin_size=10)
    assert report.n_rows == 2 * 80_001
    assert chrom_table(tmp_path / "s.zarr", "chr2") == ([0], [[1]], [[2]])


@pytest.mark.parametrize("fmt", ["auto", "tsv"])
def test_any_number_of_comment_and_blank_lines_may_precede_the_data(tmp_path, fmt):
    body = "# a comment\n\n" * 300 + "track name=x\n" + "#\n" * 50 + HEADER + "chr1\t10\t+\t1\t5\n"
    path = write(tmp_path, "c.tsv", body, gz=True)
    if fmt == "auto":
        assert detect_format(path) == "tsv"
    assert rows_of(path, None if fmt == "auto" else fmt) == [("chr1", 9, 1, 5)]
    store = tmp_path / f"{fmt}.zarr"
    assert ingest([path], "A", store, fmt=fmt).n_rows == 1


def test_invalid_utf8_in_a_chromosome_name(tmp_path):
    path = write(tmp_path, "u.tsv", HEADER.encode() + b"chr1\t10\t+\t1\t2\nchr\xff2\t10\t+\t1\t2\n")
    err = error_of(path)
    assert err.line == 3 and "field 1 ('chr\\\\xff2'): invalid UTF-8" in str(err)
    assert err.text == "chr\\xff2\t10\t+\t1\t2"


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "deflate"])
def test_corrupt_gzip_names_the_file_and_line(tmp_path, damage):
    from ..app.test_cli import run

    data = bytearray(gzip.compress((HEADER + "".join(f"chr1\t{i}\t+\t1\t2\n" for i in range(1, 200001))).encode()))
    if damage == "truncated":
        data = data[:len(data) // 2]
    else:
        data[1000:1050] = b"x" * 50  # isal's own error, not an OSError
    path = write(tmp_path, "bad.tsv.gz", bytes(data))
    err = error_of(path)
    assert "corrupt or truncated compressed data at or after this line" in str(err) and err.line >= 1
    r = run("ingest", path, "--sample", "A", "--store", tmp_path / "s.zarr")
    assert r.exit_code == 1 and f"{path}:{err.line}: corrupt or truncated" in r.output
    assert "Aborted" not in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("trailer", [-6, -2])
def test_a_gzip_whose_checksum_or_length_does_not_match_names_no_line(tmp_path, trailer):
    """A member's CRC and length are checked at its end, after all its lines: no line is to
    blame (it was "line 1, at or after this line" for a small file)."""
    data = bytearray(gzip.compress((HEADER + "".join(f"chr1\t{i}\t+\t1\t2\n" for i in range(1, 2001))).encode()))
    data[trailer] ^= 0x01  # the CRC (-8 to -5), the length (-4 to -1)
    path = write(tmp_path, "bad.tsv.gz", bytes(data))
    err = error_of(path)
    assert err.line is None and "do not match the checksum or length gzip recorded" in str(err)
    assert ("CRC check failed" if trailer == -6 else "Incorrect length") in str(err)


def test_a_small_truncated_gzip_names_the_first_line_it_lost(tmp_path):
    """The decompressor reads a small file whole before its error: the line named is the
    first that does not decompress (it was line 1), as `zcat` shows."""
    text = HEADER + "".join(f"chr1\t{i}\t+\t1\t2\n" for i in range(1, 2001))
    data = gzip.compress(text.encode())
    path = write(tmp_path, "cut.tsv.gz", data[:len(data) // 2])
    whole = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(data[:len(data) // 2]).count(b"\n")
    assert 100 < whole < 2000
    assert error_of(path).line == whole + 1


def bgzf_block(data: bytes) -> bytes:
    """One BGZF block of ``data``: a gzip member with bgzip's 'BC' field (its size)."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    header = b"\x1f\x8b\x08\x04\0\0\0\0\0\xff\x06\0BC\x02\0" + (18 + len(body) + 8 - 1).to_bytes(2, "little")
    return header + body + zlib.crc32(data).to_bytes(4, "little") + len(data).to_bytes(4, "little")


def test_a_bgzip_file_cut_between_its_blocks_is_refused(tmp_path):
    """bgzip's blocks are whole gzip members, so a file cut after one (a copy or a bgzip that
    did not finish) decompresses without an error: 4,230 of a modkit file's 17,301 rows were
    ingested as if they were all (a helper's audit). Its missing end-of-file marker says so."""
    from streambhmm.io.blocks import BGZF_EOF

    assert bgzf_block(b"") == BGZF_EOF  # the marker is an empty block
    lines = [f"chr1\t{i}\t+\t1\t2\n" for i in range(1, 3001)]
    blocks = [bgzf_block((HEADER if k == 0 else "").encode() + "".join(lines[k:k + 1000]).encode())
              for k in range(0, 3000, 1000)]
    whole = write(tmp_path, "whole.tsv.gz", b"".join(blocks) + BGZF_EOF)
    assert len(rows_of(whole)) == 3000
    cut = write(tmp_path, "cut.tsv.gz", b"".join(blocks[:2]))
    assert gzip.decompress(cut.read_bytes()).count(b"\n") == 2001  # gzip itself sees no damage
    assert "without bgzip's end-of-file marker: it was cut short" in str(error_of(cut))
    # bytes after the marker are no cut: read as any gzip file's (a helper's audit of the first version)
    more = "".join(f"chr2\t{i}\t+\t1\t2\n" for i in range(1, 11)).encode()
    assert len(rows_of(write(tmp_path, "appended.tsv.gz", whole.read_bytes() + gzip.compress(more)))) == 3010
    assert len(rows_of(write(tmp_path, "padded.tsv.gz", whole.read_bytes() + bytes(512)))) == 3000
    trailing = error_of(write(tmp_path, "trailing.tsv.gz", whole.read_bytes() + b"\n"))
    assert "followed by 1 byte that is not gzip" in str(trailing), trailing


@pytest.mark.parametrize("name", ["x" * 256, "é" * 128, ".", "..", ".hidden", "zarr.json", "ZARR.JSON", "__meta",
                                  "chr1/random", "chr1\\random", "chr\x011"])
def test_chromosome_names_that_cannot_name_a_store_group(tmp_path, name):
    path = write(tmp_path, "n.tsv", HEADER + "chr1\t10\t+\t1\t2\n" + f"{name}\t10\t+\t1\t2\n")
    err = error_of(path)
    assert err.line == 3 and "invalid chromosome name" in str(err)
    assert rows_of(path, exclude_chromosomes=(name,)) == [("chr1", 9, 1, 2)]  # unless it is excluded


@pytest.mark.parametrize("name", ["#chr2", "track", "track2", "browser"])
def test_chromosome_names_that_a_bed_reader_skips(tmp_path, name):
    """A BED line of such a chromosome reads as a comment or header: BED tools dropped 6 of a
    pmd's 15 regions (a helper's audit)."""
    path = write(tmp_path, "n.tsv", HEADER + "chr1\t10\t+\t1\t2\n" + f"{name}\t10\t+\t1\t2\n")
    err = error_of(path)
    assert err.line == 3 and "invalid chromosome name starting with '#', 'track' or 'browser'" in str(err)
    assert rows_of(path, exclude_chromosomes=(name,)) == [("chr1", 9, 1, 2)]


@pytest.mark.slow
def test_unusual_but_valid_chromosome_names_round_trip(tmp_path):
    import xarray as xr

    names = ["HLA-A*01:01:01:01", "gi|9626243|ref|NC_001416.1|", "chrUn_KI270742v1", "1", "é" * 127, "x" * 255]
    path = write(tmp_path, "n.tsv", HEADER + "".join(f"{n}\t10\t+\t1\t2\n" for n in names))
    store = tmp_path / "s.zarr"
    ingest([path], "A", store)
    assert open_store(store).chromosomes == natural_sorted(names)  # "1" first
    assert [int(xr.open_zarr(store, group=n).coverage.sum()) for n in names] == [2] * len(names)


@pytest.mark.parametrize("block_bytes", [1 << 10, 1 << 23])
def test_a_line_without_end_is_refused_early(tmp_path, block_bytes):
    body = HEADER + "chr1\t10\t+\t1\t2\n" + "chr1\t" + "7" * 300_000  # no newline: the file's last 300 kB
    with pytest.raises(FormatError) as info:
        list(read_rows(write(tmp_path, "long.tsv.gz", body, gz=True), "tsv", block_bytes=block_bytes))
    err = info.value
    assert err.line == 3 and "line longer than 65,536 bytes" in str(err) and err.text == ("chr1\t" + "7" * 300)[:200]
    assert "characters)" not in str(err)  # the line's length is not known: it is not guessed
    body = HEADER + "chr1\t1\t+\t1\t2\n" * 5 + "chr2\t" + "9" * 70_000 + "\nchr2\t1\t+\t1\t2\n"
    with pytest.raises(FormatError, match=r"long2.tsv:7: line longer than 65,536 bytes: 'chr2\\t9999") as err:
        list(read_rows(write(tmp_path, "long2.tsv", body), "tsv", block_bytes=block_bytes))
    assert len(str(err.value)) < 400 and "(the first 200 of 70,005 characters)" in str(err.value)


@pytest.mark.parametrize("members", [1, 2])
def test_bytes_after_the_gzip_data_are_named(tmp_path, members):
    text = (HEADER + "".join(f"chr1\t{i}\t+\t1\t2\n" for i in range(1, 50001))).encode()
    half = len(text) // 2
    data = gzip.compress(text) if members == 1 else gzip.compress(text[:half]) + gzip.compress(text[half:])
    err = error_of(write(tmp_path, "junk.tsv.gz", data + b"\x1f"), "tsv")
    assert err.line is None and str(err) == (f"{tmp_path / 'junk.tsv.gz'}: the gzip data end at byte {len(data):,}, "
                                             f"followed by 1 byte that is not gzip (appended to the file?); keep "
                                             f"the data with head -c {len(data)} FILE > FIXED")


@pytest.mark.parametrize("n_lines", [3, 20_000])  # within the first block, and past the line bound
def test_line_ends_of_a_carriage_return_alone_are_named(tmp_path, n_lines):
    body = HEADER + "".join(f"chr1\t{10 * i + 10}\t+\t1\t2\n" for i in range(n_lines))
    assert len(rows_of(write(tmp_path, "crlf.tsv", body.replace("\n", "\r\n")[:-1]))) == n_lines  # last \n lost
    err = error_of(write(tmp_path, "mac.tsv", body.replace("\n", "\r")), "tsv")
    assert err.line == 1 and "lines end in a carriage return (\\r) alone, not a newline; convert them" in str(err)
    stray = body.replace("\n", "\r\n").replace("chr1\t20\t", "chr1\t2\r0\t")
    err = error_of(write(tmp_path, "stray.tsv", stray), "tsv")
    assert err.line == 3 and "carriage return (\\r) inside a line" in str(err)


def test_messages_quote_at_most_200_characters(tmp_path):
    path = write(tmp_path, "wide.tsv", HEADER + "chr1\t10\t+\t1\t" + "x" * 5000 + "\n")
    err = error_of(path)
    assert err.text == ("chr1\t10\t+\t1\t" + "x" * 5000)[:200]
    assert str(err).count("(the first 200 of") == 2 and "x" * 201 not in str(err)  # the field and the line
    assert "(the first 200 of 5,012 characters)" in str(err) and len(str(err)) < 700
    # escapes count: a field of control characters, each shown as four, made a message of 950
    path = write(tmp_path, "nul.tsv", HEADER + "chr1\t10\t+\t1\t" + "\x01" * 100 + "\n")
    err = error_of(path)
    assert "(the first 50 of 100 characters)" in str(err) and len(str(err)) < 700, str(err)


def test_a_fifo_is_named_as_such(tmp_path, monkeypatch):
    fifo = tmp_path / "calls.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="calls.fifo: is a FIFO \\(named pipe\\), not a regular file"):
        ingest([fifo], "A", tmp_path / "s.zarr")
    with pytest.raises(FileNotFoundError, match="missing.tsv: no such file"):
        ingest([tmp_path / "missing.tsv"], "A", tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="is a directory"):
        ingest([tmp_path], "A", tmp_path / "s.zarr")
    monkeypatch.chdir(tmp_path)  # '-' is no file there: DNMTools' name for standard input is answered as such
    with pytest.raises(FileNotFoundError, match="standard input is not read as '-'.*save the stream to a file"):
        ingest(["-"], "A", tmp_path / "s.zarr")


BED11 = "chr1\t10\t11\t5mC\t5\t+\t10\t11\t0,0,0\t4\t50\n"
BED14 = "chr1\t20\t21\t5mC\t5\t+\t20\t21\t0,0,0\t4\t50\t2\t2\t0\n"


@pytest.mark.parametrize("body,line,message", [
    (BED11 + BED14, 2, "expected 11 fields, found 14 (the number of columns changed: the first data line has 11)"),
    (BED11 + "chr1\t30\t29\t5mC\t5\t+\t30\t31\t0,0,0\t4\t50\n", 2, "end 29 not after start 30"),
    (BED11 + "chr1\t30\t31\t5mC\t5\tX\t30\t31\t0,0,0\t4\t50\n", 2, "strand 'X' (expected one of +, -, ., *)"),
    (BED11 + "chr1\t30\t31\t5mC\t5\t+\t30\t31\t0,0,0\t4\t150\n", 2, "methylation percent 150.0 outside 0 to 100"),
])
def test_bedmethyl_checks(tmp_path, body, line, message):
    err = error_of(write(tmp_path, "b.bed", body), "bedmethyl")
    assert err.line == line and message in str(err) and "(format bedmethyl, given)" in str(err)


def test_batch_manifest_lines_are_quoted_short(tmp_path):
    from streambhmm.distributed.batch import ManifestError, read_batch_manifest

    path = write(tmp_path, "m.tsv", "sample\tgroup\tformat\tfiles\nA\tg\tcram\t" + "x" * 3000 + "\n")
    with pytest.raises(ManifestError) as err:
        read_batch_manifest(path)
    assert "unknown format 'cram'" in str(err.value) and "x" * 190 in str(err.value)
    assert "x" * 201 not in str(err.value) and "(the first 200 of 3,009 characters)" in str(err.value)


# --- exact line numbers whatever the blocks ---


KINDS = ["fields", "letters", "float", "negative", "exceeds", "repeat-back", "strand", "name", "utf8", "huge",
         "repeat"]


def corrupt(fields: list[str], previous: list[str], kind: str) -> bytes:
    chrom, pos, strand, mc, cov = fields
    line = {"repeat": "\t".join(previous), "repeat-back": "\t".join(previous),
            "fields": f"{chrom}\t{pos}\t{strand}\t{mc}",
            "letters": f"{chrom}\t{pos}\t{strand}\tab\t{cov}",
            "float": f"{chrom}\t{pos}\t{strand}\t{mc}.5\t{cov}",
            "negative": f"{chrom}\t{pos}\t{strand}\t-1\t{cov}",
            "exceeds": f"{chrom}\t{pos}\t{strand}\t{int(cov) + 1}\t{cov}",
            "strand": f"{chrom}\t{pos}\tX\t{mc}\t{cov}",
            "name": f"..\t{pos}\t{strand}\t{mc}\t{cov}",
            "huge": f"{chrom}\t{pos}\t{strand}\t{mc}\t{2 ** 40}"}.get(kind)
    return line.encode() if line is not None else f"{chrom}\xff\t{pos}\t{strand}\t{mc}\t{cov}".encode("latin-1")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 400), at=st.floats(0, 1, exclude_max=True), kind=st.sampled_from(KINDS),
       blanks=st.booleans(), spaces=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_the_first_bad_line_is_named_exactly_for_any_blocking(tmp_path, n, at, kind, blanks, spaces, seed):
    rng = np.random.default_rng(seed)
    positions = np.cumsum(rng.integers(2, 50, n)) + 10
    lines = [[f"chr{1 + i * 3 // n}", str(p), "+-"[i % 2], "1", str(1 + i % 7)] for i, p in enumerate(positions)]
    k = max(1, int(at * n))  # never the first data line: it sets the number of fields
    if kind == "repeat-back" and (k < 2 or lines[k][0] != lines[k - 2][0]):
        kind = "exceeds"
    text = [("\t" if not spaces else "  \t ").join(f).encode() for f in lines]
    # repeat-back: the row before the previous one again (positions go back: found by the second reading)
    text[k] = corrupt(lines[k], lines[k - 2] if kind == "repeat-back" else lines[k - 1], kind)
    if blanks:
        text = [t for i, line in enumerate(text) for t in ((line, b"") if i % 5 == 4 else (line,))]
    line_no = 2 + k + (k // 5 if blanks else 0)
    path = tmp_path / f"f{seed}.tsv"
    path.write_bytes(HEADER.encode() + b"\n".join(text) + b"\n")
    errors = set()
    for block_bytes in (37, 1000, 1 << 20):
        with pytest.raises(FormatError) as err:
            list(read_rows(path, "tsv", options=ReadOptions(), block_bytes=block_bytes))
        errors.add((err.value.line, err.value.message))
    assert len(errors) == 1 and errors.pop()[0] == line_no


# --- the options on the command line ---


@pytest.mark.slow
def test_cli_ingest_options(tmp_path):
    from ..app.test_cli import run

    path = write(tmp_path, "calls.txt", "chrM\t5\t9\t0\nchr1\t10\t3\t5\nchr1\t11\t1\t1\nchr1\t250\t2\t0\n")
    store = tmp_path / "s.zarr"
    r = run("ingest", path, "--sample", "A", "--store", store, "--columns", "chrom=1,pos=2,meth=3,unmeth=4",
            "--zero-based", "--min-coverage", "3", "--exclude-chromosomes", "chrM", "--bin-size", "10")
    assert r.exit_code == 0, r.output
    assert "1 row from 1 file(s) read by --columns" in r.output
    assert "; left out: 2 rows with fewer than --min-coverage 3 reads" in r.output
    assert chrom_table(store, "chr1") == ([10], [[3]], [[8]])
    options = open_store(store).attrs["samples"]["A"]["options"]
    assert options["columns"] == {"chrom": 1, "pos": 2, "meth": 3, "unmeth": 4} and options["zero_based"]
    r = run("ingest", path, "--sample", "B", "--store", store, "--columns", "chrom=1,pos=2")
    assert r.exit_code == 2 and "--columns needs chrom, pos, meth and one of total or unmeth" in r.output
    r = run("ingest", path, "--sample", "B", "--store", store, "--zero-based")
    assert r.exit_code == 2 and "--zero-based and --header describe a --columns file" in r.output
    r = run("ingest", path, "--sample", "B", "--store", tmp_path / "t.zarr", "--merge-strands", "--format", "methrix")
    assert r.exit_code == 1 and "--merge-strands: format methrix has one row per cytosine" in r.output


@pytest.mark.slow
def test_batch_applies_the_options_to_every_sample(tmp_path, dask_clients):
    from ..app.test_cli import run

    write(tmp_path, "cx.txt", CX)
    write(tmp_path, "t.tsv", HEADER + "chr1\t10\t+\t1\t2\nchr1\t11\t-\t1\t1\nchr2\t5\t+\t1\t1\n")
    manifest = write(tmp_path, "m.tsv", "sample\tgroup\tformat\tfiles\nA\tg\tauto\tcx.txt\nB\tg\ttsv\tt.tsv\n")
    work = tmp_path / "work"
    r = run("batch", manifest, "--workdir", work, "--bins", "4", "--bin-size", "1", "--merge-strands",
            "--exclude-chromosomes", "chr2", "--scheduler", dask_clients[1].scheduler.address, "-q")
    assert r.exit_code == 0, r.output
    store = open_store(work / "g" / "counts.zarr")
    assert store.chromosomes == ["chr1"]
    assert all(store.attrs["samples"][s]["options"]["merge_strands"] for s in "AB")
    import xarray as xr

    ds = xr.open_zarr(work / "g" / "counts.zarr", group="chr1").sel(sample=["A", "B"])  # concurrent ingests:
    covered = ds.coverage.values.sum(axis=1) > 0  # the columns are in the order the commits came
    assert (ds.position.values[covered].tolist(), ds.methylated.values[covered].tolist(),
            ds.coverage.values[covered].tolist()) == ([9, 99, 198], [[0, 2], [5, 0], [5, 0]], [[0, 3], [8, 0], [5, 0]])


def test_format_errors_survive_pickling():
    import pickle

    err = FormatError("a.tsv", 3, "x" * 300, "bad count", "tsv, detected")
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and (again.line, again.text, again.fmt) == (3, "x" * 200, "tsv, detected")


# --- rows in any order within a chromosome ---


@pytest.mark.parametrize("seed,chunk_size", [(0, 40), (1, 10_000)])
def test_shuffled_rows_ingest_as_the_sorted_file(tmp_path_factory, seed, chunk_size):
    """Rows shuffled within each chromosome (chromosomes contiguous) read as the same rows and
    make a store with the same counts as the sorted file, whatever the blocks and chunks."""
    tmp_path = tmp_path_factory.mktemp("shuffled")
    rng = np.random.default_rng(seed)
    lines = []
    for chrom in ("chr1", "chr2", "chr3"):
        positions = np.unique(rng.integers(1, 5000, rng.integers(1, 120)))
        rows = [f"{chrom}\t{p}\t{'+-'[int(p) % 2]}\t{rng.integers(0, 4)}\t{rng.integers(4, 9)}\n" for p in positions]
        lines.append(rows)
    ordered = write(tmp_path, "sorted.tsv", HEADER + "".join(r for rows in lines for r in rows))
    shuffled = write(tmp_path, "shuffled.tsv.gz", HEADER + "".join(
        r for rows in lines for r in rng.permutation(rows)), gz=True)
    key = lambda row: (row[0], row[1])  # noqa: E731
    for block_bytes in (60, 700, 1 << 20):
        read = [(r.chrom, int(p)) for r in read_rows(shuffled, "tsv", block_bytes=block_bytes) for p in r.pos0]
        assert sorted(read) == [key(row) for row in rows_of(ordered)]
    assert sorted(rows_of(shuffled), key=key) == rows_of(ordered)
    stores = []
    for name, path in (("a", ordered), ("b", shuffled)):
        ingest([path], "A", tmp_path / f"{name}.zarr", bin_size=10, chunk_size=chunk_size)
        stores.append(open_store(tmp_path / f"{name}.zarr"))
    assert stores[0].chromosomes == stores[1].chromosomes
    for chrom in stores[0].chromosomes:
        for variable in ("methylated", "coverage"):
            np.testing.assert_array_equal(stores[0].dataset(chrom)[variable].values,
                                          stores[1].dataset(chrom)[variable].values)


@pytest.mark.parametrize("block_bytes", [30, 100, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_a_repeat_far_back_in_an_unsorted_chromosome_names_both_lines(tmp_path, block_bytes, gz):
    body = HEADER + ("chr1\t50\t+\t1\t2\nchr1\t10\t+\t1\t2\nchr1\t10\t-\t1\t2\nchr1\t70\t+\t1\t2\n"
                     "chr1\t30\t+\t1\t2\nchr1\t10\t-\t2\t2\nchr2\t5\t+\t1\t1\n")
    path = write(tmp_path, "u.tsv", body, gz)
    with pytest.raises(FormatError) as err:
        list(read_rows(path, "tsv", block_bytes=block_bytes))
    assert err.value.line == 7 and err.value.text == "chr1\t10\t-\t2\t2"
    assert "repeats the chromosome, position and strand of line 4 ('chr1\\t10\\t-\\t1\\t2')" in err.value.message
    store = tmp_path / "s.zarr"
    with pytest.raises(FormatError, match="u.tsv:7: repeats the chromosome"):
        ingest([path], "A", store)
    assert not store.exists()


def test_the_rows_of_a_chromosome_must_still_be_contiguous(tmp_path):
    path = write(tmp_path, "c.tsv", HEADER + "chr1\t50\t+\t1\t2\nchr2\t10\t+\t1\t2\nchr1\t10\t+\t1\t2\n")
    err = error_of(path, "tsv")
    assert err.line == 4 and "chromosome chr1 appears again after other chromosomes (a chromosome's rows must be " \
                              "contiguous" in err.message


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.sampled_from(["chr1", "chr2", "chr10", "chr1_x", "", "chrä", "c", "chr11"]), min_size=1,
                      max_size=40), cut=st.integers(0, 5))
def test_chromosome_changes_and_numbers_read_from_the_buffers_equal_pyarrow(names, cut):
    """The raw-buffer readers (no pyarrow.compute, no pandas) against Python on the values,
    sliced arrays included."""
    import pyarrow as pa

    from streambhmm.io.parser import changes, numbers

    strings = pa.array(names, pa.string()).slice(min(cut, len(names) - 1))
    values = strings.to_pylist()
    expected = [i for i in range(len(values)) if i == 0 or values[i] != values[i - 1]]
    assert changes(strings).tolist() == expected
    integers = pa.array(np.arange(len(names), dtype=np.int64) * 7 - 3).slice(min(cut, len(names) - 1))
    assert numbers(integers).tolist() == integers.to_pylist()
    floats = pa.array(np.linspace(0, 1, len(names))).slice(min(cut, len(names) - 1))
    assert numbers(floats).tolist() == floats.to_pylist()
