"""The CPU convolution kernels' scratch: one buffer a thread shares (``base.scratch``).

Kernels bound once keep views of the same memory, so each call must write what it reads there
(its padded copy, zero padding included; its im2col columns; its transformed tiles) before
reading it: here the thread's whole scratch is filled with NaN before every call, in every
order of the kernels, and each result is compared with the convolution by its definition. A
second thread has a scratch of its own: two threads running the same bound kernels at once
stay right."""
from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

import dml_numba as dml
from dml_numba._frozen import freeze
from dml_numba.cpu.convolution import base
from tests.cases import compare, conv_case
from tests.ops.test_convolution_blocked import brute_force
from tests.ops.test_convolution_winograd import TOLERANCE as WINOGRAD_TOLERANCE

#: (algorithm, conv_case's arguments): one of each kind of scratch use. Strides, dilations,
#: start and end padding
_ONE, _PAD = ((1, 1), (1, 1)), ((1, 1), (1, 1))
CASES = {
    "blocked-padded-copy": ("blocked", ((2, 8, 9, 11), (16, 8, 3, 3), *_ONE, *_PAD, 1)),
    "blocked-depthwise-slots": ("blocked", ((1, 16, 6, 19), (16, 1, 3, 3), *_ONE, *_PAD, 16)),
    "blocked-depthwise-narrow-strided": ("blocked", ((1, 32, 5, 5), (32, 1, 3, 3), (2, 2), (1, 1),
                                            *_PAD, 32)),
    "gemm-im2col": ("gemm", ((2, 4, 7, 7), (6, 4, 3, 3), *_ONE, (1, 0), (0, 1), 1)),
    "winograd": ("winograd", ((1, 8, 12, 12), (8, 8, 3, 3), *_ONE, *_PAD, 1)),
}


@pytest.fixture(scope="module")
def cases():
    """Each case's descriptor, kernel, inputs (a frozen filter, as a model's: a bound call
    keeps its scratch view) and the definition's result."""
    out = {}
    for name, (algorithm, args) in CASES.items():
        desc, (x, w, b) = conv_case(*args)
        op = dml.compile_operator(desc, "cpu", algorithm=algorithm, parallel=False)
        assert op.kernel.algorithm == algorithm
        out[name] = (desc, op.kernel, [x, freeze(w), b], brute_force(desc, x, w, b))
    return out


def _check(name, desc, y, ref) -> None:
    """``y`` is the definition's result: within the comparison's tolerance, Winograd's within
    its own bound (its transforms round differently: a fraction of the largest output, not of
    each element, as BLAS's kernels sum its products in their order)."""
    if CASES[name][0] != "winograd":
        compare(desc, y, ref)
        return
    assert np.isfinite(y).all()
    scale = max(np.abs(ref).max(), 1.0)
    assert np.abs(y - ref).max() <= WINOGRAD_TOLERANCE * scale


def _bind(case):
    """The kernel's call bound once to its inputs and a new output: (call, output)."""
    desc, kernel, inputs, _ = case
    y = np.empty(desc.output_tensor.sizes, np.float32)
    return kernel.bound(inputs, y), y


def _poison() -> None:
    """This thread's whole scratch filled with NaN (what another kernel may have left)."""
    buf = getattr(base._scratch, "buf", None)
    if buf is not None:
        buf.view(np.float32)[:] = np.nan


def test_bound_kernels_share_the_thread_s_scratch(cases):
    """Two blocked kernels bound one after the other keep views of the same memory (the second
    no larger than the buffer the first left); a larger one grows the buffer, and the views
    made before keep theirs, still right."""
    base.scratch((cases["blocked-padded-copy"][1].copy_size,), np.float32)  # room for both
    first, y1 = _bind(cases["blocked-padded-copy"])
    second, y2 = _bind(cases["blocked-padded-copy"])
    assert np.shares_memory(first.args[-1], second.args[-1])
    grown = base.scratch((8 * base._scratch.buf.size,), np.uint8)
    assert not np.shares_memory(grown, first.args[-1])
    for run, y in ((first, y1), (second, y2)):
        _poison()
        run()
        compare(cases["blocked-padded-copy"][0], y, cases["blocked-padded-copy"][3])


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))) + [(4, 3, 0, 1, 2)])
def test_every_call_writes_its_scratch_before_reading_it(cases, order):
    """The kernels bound once, called in turn, the scratch full of NaN before each call: every
    result is the definition's (a kernel reading scratch it did not write in that call would
    read NaN)."""
    names = list(CASES)
    bound = {name: _bind(cases[name]) for name in names}
    for i in list(order) + list(order):
        name = names[i]
        (run, y), (desc, _, _, ref) = bound[name], cases[name]
        _poison()
        y[...] = np.nan
        run()
        _check(name, desc, y, ref)


def test_each_kernel_declares_the_scratch_it_takes(cases):
    """``scratch_bytes()``, what a compiled graph reserves before binding its steps, is the
    most of the thread's scratch a call takes: a call in a new thread (its scratch empty)
    grows it to exactly that."""
    sizes = {}

    def work():
        for name in CASES:
            base._scratch.__dict__.pop("buf", None)
            desc, kernel, inputs, ref = cases[name]
            y = np.full(desc.output_tensor.sizes, np.nan, np.float32)
            kernel.bound(inputs, y)()
            _check(name, desc, y, ref)
            sizes[name] = (base._scratch.buf.nbytes, kernel.scratch_bytes())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert sizes.keys() == CASES.keys()
    for name, (taken, declared) in sizes.items():
        assert taken == declared > 0, name


def test_another_thread_has_a_scratch_of_its_own(cases):
    """Two threads binding and running the kernels (serial, their calls outside the GIL) at
    once, each in its own order: their scratch views share no memory, and both are right
    every time."""
    failures, views = [], []

    def work(seed):
        rng = np.random.default_rng(seed)
        bound = {name: _bind(cases[name]) for name in CASES}
        views.append(bound["blocked-padded-copy"][0].args[-1])
        for _ in range(15):
            for name in rng.permutation(list(CASES)):
                (run, y), (desc, _, _, ref) = bound[name], cases[name]
                y[...] = np.nan
                run()
                try:
                    _check(name, desc, y, ref)
                except AssertionError as exc:
                    failures.append(f"{name}: {exc}")
                    return

    threads = [threading.Thread(target=work, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(views) == 2 and not np.shares_memory(*views)
