"""Names: one chromosome spelt two ways (chr21 and 21), --chromosome-names, the rule for
sample names, and names shown by `info` (each test here failed before its fix)."""

import json

import numpy as np
import pytest

from streambhmm.io.formats import FormatError, ReadOptions
from streambhmm.io.ingest import ingest
from streambhmm.io.store import open_store
from streambhmm.testing import write_store

from ..app.test_cli import run
from .test_ingest import chrom_table, tree_digest

HEADER = "chrom\tpos\tstrand\tmc\tcov\n"


def tsv(tmp_path, name, *chromosomes, mc=1):
    path = tmp_path / name
    path.write_text(HEADER + "".join(f"{c}\t{10 + i}\t+\t{mc}\t2\n" for c in chromosomes for i in range(3)))
    return path


def test_the_two_conventions():
    from streambhmm.io.names import ensembl_name, ucsc_name

    assert [ucsc_name(n) for n in ("1", "22", "X", "Y", "MT", "chr1", "GL000192.1", "01", "chrM")] == \
        ["chr1", "chr22", "chrX", "chrY", "chrM", "chr1", "GL000192.1", "01", "chrM"]
    assert [ensembl_name(n) for n in ("chr1", "chr22", "chrX", "chrY", "chrM", "1", "chrUn_gl000220", "chr01")] == \
        ["1", "22", "X", "Y", "MT", "1", "chrUn_gl000220", "chr01"]


def test_one_chromosome_spelt_two_ways_in_the_replicates_is_refused(tmp_path):
    a, b = tsv(tmp_path, "a.tsv", "chr21"), tsv(tmp_path, "b.tsv", "21")
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=r"b.tsv has chromosome 21, but .*a.tsv spells it chr21: they would be two "
                                         r"chromosomes.*--chromosome-names ucsc"):
        ingest([a, b], "A", store)
    assert not store.exists()
    both = tsv(tmp_path, "both.tsv", "21", "chr21")
    with pytest.raises(ValueError, match=r"both.tsv has chromosome chr21, but it also has 21.*--chromosome-names "
                                         r"ensembl"):
        ingest([both], "A", store)
    ingest([a, b], "A", store, options=ReadOptions(chromosome_names="ucsc"))
    assert open_store(store).chromosomes == ["chr21"]
    assert chrom_table(store, "chr21") == ([0], [[6]], [[12]])  # both replicates' rows in one chromosome


def test_a_sample_spelling_the_stores_chromosomes_otherwise_is_refused(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([tsv(tmp_path, "a.tsv", "chr21", "chrM")], "A", store)
    before = tree_digest(store)
    for names, message in ((("21",), r"has chromosome 21, but the store .*s.zarr spells it chr21.*ucsc"),
                           (("chrMT",), r"has chromosome chrMT, but the store .* spells it chrM.*--chromosome-names "
                                        r"FILE, FILE listing 'chrMT chrM'")):
        with pytest.raises(ValueError, match=message):
            ingest([tsv(tmp_path, "b.tsv", *names)], "B", store)
        assert tree_digest(store) == before
    ingest([tsv(tmp_path, "b.tsv", "21", "MT", "GL000192.1")], "B", store, options=ReadOptions(chromosome_names="ucsc"))
    assert sorted(open_store(store).chromosomes) == ["GL000192.1", "chr21", "chrM"]
    assert open_store(store).attrs["samples"]["B"]["options"]["chromosome_names"] == "ucsc"


def test_an_ingest_committing_after_another_spelling_came_in_is_refused(tmp_path):
    """Ingests of one store run at once (batch): the spelling is checked again at the commit."""
    store = tmp_path / "s.zarr"
    first, second = tsv(tmp_path, "a.tsv", "chr21"), tsv(tmp_path, "b.tsv", "21")
    happened = []

    def commit_a_meanwhile(done, total, note=None):  # called while B reads its file, before B's commit
        if not happened:
            happened.append(ingest([first], "A", store))

    with pytest.raises(ValueError, match=r"sample B has chromosome 21, but the store .* spells it chr21"):
        ingest([second], "B", store, progress=commit_a_meanwhile)
    assert happened and open_store(store).samples == ["A"] and open_store(store).chromosomes == ["chr21"]


def test_a_sample_replaced_with_the_other_spelling_is_no_clash(tmp_path):
    """The only data under '21' is the sample being replaced: spelling it chr21 now is the fix."""
    store = tmp_path / "s.zarr"
    ingest([tsv(tmp_path, "a.tsv", "chr1")], "A", store)
    ingest([tsv(tmp_path, "b.tsv", "21")], "B", store)
    ingest([tsv(tmp_path, "b.tsv", "21")], "B", store, options=ReadOptions(chromosome_names="ucsc"))
    ingest([tsv(tmp_path, "c.tsv", "chr21")], "C", store)
    with pytest.raises(ValueError, match="has chromosome 21, but the store .* spells it chr21"):
        ingest([tsv(tmp_path, "d.tsv", "21")], "D", store)


def test_a_mapping_file(tmp_path):
    mapping = tmp_path / "names.txt"
    mapping.write_text("# from to\n\nNC_000021.9\tchr21\nNC_012920.1 chrM\n")
    path = tsv(tmp_path, "a.tsv", "NC_000021.9", "NC_012920.1", "chrUn")
    store = tmp_path / "s.zarr"
    ingest([path], "A", store, options=ReadOptions(chromosome_names=str(mapping),
                                                    exclude_chromosomes=("chrM",)))
    assert open_store(store).chromosomes == ["chr21", "chrUn"]  # the filters match the new names
    recorded = open_store(store).attrs["samples"]["A"]["options"]
    assert recorded["chromosome_names"] == str(mapping.resolve()) and len(recorded["chromosome_map"]) == 64


@pytest.mark.parametrize("text,line,message", [
    ("chr1\tchr1\textra\n", 1, "expected 2 columns"),
    ("# c\n1\tchr 1\n", None, "expected 2 columns"),
    ("1\tchr1\n2\t.hidden\n", 2, "invalid chromosome name starting with '.'"),
    ("1\tchr1\n1\tchr2\n", 2, "1 is renamed chr1 at line 1 ('1\\tchr1')"),
    ("# nothing\n", None, "no names to map"),
])
def test_a_bad_mapping_file_is_refused_with_its_line(tmp_path, text, line, message):
    mapping = tmp_path / "names.txt"
    mapping.write_text(text)
    with pytest.raises(FormatError) as err:
        ReadOptions(chromosome_names=str(mapping))
    assert message in str(err.value) and (line is None or err.value.line == line)


@pytest.mark.slow
def test_cli_chromosome_names(tmp_path):
    store = tmp_path / "s.zarr"
    assert run("ingest", tsv(tmp_path, "a.tsv", "chr21"), "--sample", "A", "--store", store).exit_code == 0
    r = run("ingest", tsv(tmp_path, "b.tsv", "21"), "--sample", "B", "--store", store)
    assert r.exit_code == 1 and "pass --chromosome-names ucsc to spell it chr21" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = run("ingest", tmp_path / "b.tsv", "--sample", "B", "--store", store, "--chromosome-names", "ucsc")
    assert r.exit_code == 0, r.output
    r = run("ingest", tmp_path / "b.tsv", "--sample", "C", "--store", store, "--chromosome-names", "nowhere.txt")
    assert r.exit_code == 2 and "--chromosome-names nowhere.txt: no such file (give ucsc, ensembl" in r.output


# --- sample names ---


@pytest.mark.parametrize("name,message", [
    ("H1 a", "invalid sample name with a control or whitespace character: 'H1 a'"),
    ("H1,a", "invalid sample name with ','"),
    ("\x1b[31mred", "invalid sample name with a control or whitespace character"),
    ("a/b", "invalid sample name with '/'"),
    ("", "invalid sample name of 0 bytes"),
])
def test_a_sample_name_that_decode_would_refuse_is_refused_at_ingest(tmp_path, name, message):
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        ingest([tsv(tmp_path, "a.tsv", "chr1")], name, store)
    assert not store.exists()


@pytest.mark.parametrize("name", ["H1 a", "H1,a"])
def test_a_model_with_such_a_sample_is_refused_by_the_same_rule(tmp_path, name):
    from streambhmm.app.modelio import model_to_dict, read_model
    from streambhmm.learn.hmm import BinomialHMM

    hmm = BinomialHMM(2).start_from(np.full(2, 0.5), np.array([[0.9, 0.1], [0.1, 0.9]]), np.array([[0.1], [0.9]]))
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model_to_dict(hmm, [name], ["chr1"], method="em")))
    with pytest.raises(ValueError, match="m.json: samples hold an invalid sample name with"):
        read_model(path)
    path.write_text(json.dumps(model_to_dict(hmm, ["H1_a"], ["chr1"], method="em")))
    assert read_model(path)["samples"] == ["H1_a"]


def test_a_batch_manifest_with_such_a_sample_is_refused_before_any_ingest(tmp_path):
    from streambhmm.distributed.batch import read_batch_manifest

    manifest = tmp_path / "m.tsv"
    manifest.write_text("sample\tgroup\tformat\tfiles\nH1\tg\tauto\ta.tsv\nH1 b\tg\tauto\tb.tsv\n")
    with pytest.raises(ValueError, match=r"m.tsv, line 3: 'H1 b\\tg\\tauto\\tb.tsv': invalid sample name with a "
                                         r"control or whitespace character"):
        read_batch_manifest(manifest)


@pytest.mark.slow
def test_info_escapes_control_characters_of_names_in_an_old_store(tmp_path):
    """Ingest refuses such names now; a store written before (or by hand) may hold them."""
    store = tmp_path / "s.zarr"
    write_store(store, {"chr\x1b]0;x\x07": (np.array([1]), np.array([[1]]), np.array([[2]]))}, ["\x1b[31mred"])
    r = run("info", store)
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "sample \\x1b[31mred:" in r.output and "chr\\x1b]0;x\\x07" in r.output
    r = run("moments", store, "--output", tmp_path / "m.zarr")
    assert r.exit_code == 0 and "samples \\x1b[31mred;" in r.output and "\x1b" not in r.output, r.output
