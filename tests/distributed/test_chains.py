"""The posterior pass over a store (distributed.chains.map_posteriors): results in order, and
no more of them held at once than a few chromosomes' worth, whatever the genome."""

import numpy as np

from streambhmm.distributed.chains import RESULTS_AHEAD, map_posteriors
from streambhmm.distributed.messages import Params
from streambhmm.io.tasks import InProcessClient
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.testing import write_store


class CountingClient(InProcessClient):
    """An InProcessClient that counts the tasks it was given."""

    submitted = 0

    def compute(self, collections):
        self.submitted += len(collections)
        return super().compute(collections)


def chunk_bins(posteriors, data):
    return posteriors.shape[0]


def test_the_posterior_pass_holds_a_bounded_number_of_results(tmp_path):
    rng = np.random.default_rng(0)
    n = 300  # bins per chromosome: 3 chunks of 100
    chromosomes = {f"chr{k}": (np.arange(n), rng.binomial(10, 0.5, (n, 1)), np.full((n, 1), 10)) for k in range(12)}
    store = write_store(tmp_path / "s.zarr", chromosomes, ["A"], chunk_size=100)
    hmm = BinomialHMM(2).start_from(np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.1, 0.9]]), np.array([[0.2], [0.8]]))
    with CountingClient(1) as client:
        waiting, order = [], []
        for done, (ref, bins) in enumerate(map_posteriors(store, ["A"], Params.of(hmm), client, chunk_bins), 1):
            waiting.append(client.submitted - done + 1)  # given to the client and not yet read, this one included
            order.append((ref.chrom, ref.start))
            assert bins == 100
    assert order == [(f"chr{k}", start) for k in range(12) for start in (0, 100, 200)]
    # whole chromosomes start while fewer than RESULTS_AHEAD (2) per thread wait: at most one
    # chromosome (3 chunks) beyond that; all 36 at once before
    assert RESULTS_AHEAD == 2 and max(waiting) <= 4
    assert client.submitted == 36


def test_short_contigs_give_their_posteriors_in_order(tmp_path):
    # consecutive one-chunk chromosomes share a task; each chunk's result still comes on its own
    rng = np.random.default_rng(1)
    lengths = {"chr1": 250, **{f"chrUn{k}": int(rng.integers(1, 30)) for k in range(20)}, "chr2": 130}
    chromosomes = {name: (np.arange(n), rng.binomial(10, 0.4, (n, 1)), np.full((n, 1), 10))
                   for name, n in lengths.items()}
    store = write_store(tmp_path / "s.zarr", chromosomes, ["A"], chunk_size=100)
    hmm = BinomialHMM(2).start_from(np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([[0.2], [0.7]]))
    with CountingClient(2) as client:
        results = list(map_posteriors(store, ["A"], Params.of(hmm), client, lambda post, data: post))
        assert client.submitted < len(results)
    assert [(ref.chrom, ref.start) for ref, _ in results] == [
        (chrom, start) for chrom in store.chromosomes for start in range(0, lengths[chrom], 100)]
    for chrom in store.chromosomes:
        got = np.vstack([post for ref, post in results if ref.chrom == chrom])
        _, meth, cov = chromosomes[chrom]
        np.testing.assert_allclose(got, hmm.predict_proba(meth, cov), atol=1e-10)
