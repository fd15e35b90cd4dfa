"""A new installation compiles each kernel once: numba compiles a kernel again for every new
signature of its arguments, and a kernel that calls another with a variable still typed as
the literal 0 (``offset = 0`` before a loop) compiles the callee twice, once for
Literal[int](0) and once for int64. Each case here types one calling kernel, as numba does
before compiling it, and records the signatures it asks of the kernels it calls."""

import numba
import numpy as np
import pytest
from numba.core import compiler
from numba.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.core.dispatcher import Dispatcher
from numba.core.registry import cpu_target
from numba.core.typed_passes import NopythonTypeInference

from streambhmm.learn import _emission_kernels, _refine_kernels, hmm_kernels
from streambhmm.moments import moment_kernels
from streambhmm.moments.features import encode


def forward_backward_args():
    n, m = 10, 3
    return (hmm_kernels._forward_backward, np.zeros((n, m)), np.ones((n, m)), np.zeros(n), np.zeros((n, m)),
            np.array([4, 6]), np.full(m, 1 / m), np.full((m, m), 1 / m), np.zeros((1, n), np.int32), np.ones(m),
            np.zeros((1, 5, m)))


def triples_args():
    rng = np.random.default_rng(0)
    coverage = rng.integers(0, 9, (20, 2))
    features = encode(rng.binomial(coverage, 0.5), coverage, 4)
    sd = 8
    return (moment_kernels.accumulate_triples, features.codes, np.arange(18), features.table,
            features.coverage.astype(np.float64), features.methylated.astype(np.float64), np.zeros((sd, sd)),
            np.zeros((sd, sd)), np.zeros((sd, sd)), np.zeros((sd, sd, sd)), np.zeros((2, sd)), np.zeros((2, sd)),
            np.zeros(2), 16, 8)


def betabinomial_args(kernel):
    def args():
        coverage, methylated, a, b = np.array([3, 5]), np.array([1, 2]), np.ones(2), np.ones(2)
        if kernel is _emission_kernels.betabinomial_table:
            return kernel, coverage, methylated, np.zeros(2), a, b, np.zeros((2, 2))
        return kernel, coverage, methylated, np.ones((2, 2)), a, b, np.zeros(2), np.zeros(2)
    return args


def histogram_args(kernel):
    def args():
        c, mu, offsets, samples, levels = np.array([3, 5]), np.array([1, 2]), np.array([0, 2]), np.array([0]), \
            np.full((2, 1), 0.5)
        if kernel is _emission_kernels.entry_logliks:
            return kernel, c, mu, np.zeros(2), offsets, samples, levels, levels, levels, True
        if kernel is _emission_kernels.entry_slopes:
            return kernel, c, mu, offsets, samples, levels, levels, levels, True, np.ones((2, 2)), np.zeros((2, 1)), \
                np.zeros((2, 1))
        table = np.zeros((2, 2))
        return (kernel, np.ones(2), np.array([0, 2]), np.zeros((1, 0), np.int64), np.array([0, 1]),
                np.array([[0], [1]]), table, table, np.zeros(2), np.full(2, 0.5), np.full((2, 2), 0.5), False,
                np.zeros(2), np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(2))
    return args


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopAfterTyping(FunctionPass):
    _name = "stop_after_typing"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise compiler._EarlyPipelineCompletion(state.typemap)  # a result: the pipeline ends here


class _TypingOnly(compiler.CompilerBase):
    """numba's nopython pipeline up to its type inference: no machine code is made."""

    def define_pipelines(self):
        pm = PassManager("typing only")
        pm.passes.extend(compiler.DefaultPassBuilder.define_untyped_pipeline(self.state).passes)
        pm.add_pass(NopythonTypeInference, "nopython frontend")
        pm.add_pass(_StopAfterTyping, "stop after typing")
        pm.finalize()
        return [pm]


def callee_signatures(kernel, *args) -> list:
    """The signatures ``kernel``, typed for ``args``, asks of the compiled kernels it calls."""
    asked = []
    original = Dispatcher.get_call_template

    def recording(self, types, kws):
        asked.append((self.py_func.__qualname__, types))
        return original(self, types, kws)

    flags = compiler.Flags()
    flags.nrt = True
    Dispatcher.get_call_template = recording
    try:
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
        compiler.compile_extra(cpu_target.typing_context, cpu_target.target_context, kernel.py_func,
                               tuple(numba.typeof(a) for a in args), None, flags, {}, pipeline_class=_TypingOnly)
    finally:
        Dispatcher.get_call_template = original
    return [(name, types) for name, types in asked if not name.endswith("impl")]  # numba's own overloads


@pytest.mark.parametrize("case", [forward_backward_args, triples_args,
                                  betabinomial_args(_emission_kernels.betabinomial_table),
                                  betabinomial_args(_emission_kernels.betabinomial_slopes),
                                  histogram_args(_emission_kernels.entry_logliks),
                                  histogram_args(_emission_kernels.entry_slopes),
                                  histogram_args(_refine_kernels.mixture_loglik)],
                         ids=["forward_backward", "triples", "betabinomial_table", "betabinomial_slopes", "entry_logliks",
                              "entry_slopes", "mixture_loglik"])
def test_kernels_call_kernels_with_no_literal_arguments(case):
    asked = callee_signatures(*case())
    assert asked, "the case calls no compiled kernel: nothing checked"
    literal = [(name, [str(t) for t in types]) for name, types in asked
               if any(isinstance(t, numba.types.Literal) for t in types)]
    assert not literal


def test_every_caller_hands_the_recursion_one_signature(monkeypatch):
    """One sample or two, the model in memory or a chunk's task with an incoming message (a
    new first row): the forward-backward recursion gets arguments of the same numba types.
    The codes of one sample and of two had two layouts (C and F), which cost a first run
    6-8 s of compilation more."""
    from streambhmm.distributed.messages import Params, statistics_between
    from streambhmm.learn.emissions import EmissionTable
    from streambhmm.learn.hmm import BinomialHMM

    seen = []
    original = hmm_kernels._forward_backward

    def recording(*args):
        seen.append(tuple(numba.typeof(a) for a in args))
        return original(*args)

    monkeypatch.setattr(hmm_kernels, "_forward_backward", recording)
    rng = np.random.default_rng(0)
    for n_samples in (1, 2):
        coverage = rng.integers(0, 9, (50, n_samples))
        methylated = rng.binomial(coverage, 0.5)
        hmm = BinomialHMM(2, emission="betabinomial").start_from(
            np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.1, 0.9]]), np.tile([[0.2], [0.8]], n_samples),
            np.full((2, n_samples), 0.05))
        hmm.score(methylated, coverage)
        params, table = Params.of(hmm), EmissionTable(methylated, coverage)
        statistics_between(np.array([0.3, 0.7]), None, params.log_b(table), params, True, table)
    assert len(seen) == 4 and len(set(seen)) == 1, seen
