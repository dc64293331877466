"""The CPU convolution's kernel variants (``dml_numba/cpu/convolution/variants.py``): each owns
its plans, its estimate, its kernel's name and its emitter; the choice and the tuner iterate
over them, so a new tile is one class (shown here by adding one: nothing else is edited)."""
import math

import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from dml_numba.cpu.convolution import choice, tune, variants
from dml_numba.cpu.convolution.blocked import forward
from dml_numba.cpu.convolution.blocked.plan import block_plan, pointwise_as_1d
from tests.cases import compare, conv_case

HOSTS = (Host(16, 2), Host(8, 16), Host(4, 1))
F16 = dml.DataType.FLOAT16


def _descs():
    """Descriptors every variant applies to somewhere: dense 3x3 (pixels, channels), 1x1
    (flattened), strided, depthwise, transposed, 1-D and 3-D, float16 and float64."""
    cases = [
        ((1, 16, 14, 14), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
        ((2, 16, 14, 14), (32, 16, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
        ((1, 16, 15, 15), (16, 16, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
        ((1, 16, 14, 14), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 16),
        ((1, 16, 20), (8, 16, 3), (1,), (1,), (1,), (1,), 1),
        ((1, 4, 6, 6, 6), (4, 4, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    ]
    out = [conv_case(*c)[0] for c in cases]
    out.append(conv_case((1, 8, 8, 8), (8, 8, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1,
                         direction=dml.ConvolutionDirection.BACKWARD)[0])
    out.append(conv_case((1, 16, 14, 14), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                         dtype=np.float16)[0])
    out.append(conv_case((1, 8, 9, 9), (8, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                         dtype=np.float64)[0])
    return [d.canonical() for d in out]


DESCS = _descs()


def test_each_kernel_name_is_declared_by_one_variant():
    names = [k for v in variants.VARIANTS for k in v.emitters]
    assert len(names) == len(set(names))
    for name in names:
        assert any(variants.emitter(name) is fn for v in variants.VARIANTS
                   for fn in v.emitters.values())
    with pytest.raises(KeyError, match="no CPU convolution variant emits"):
        variants.emitter("nothing")


def test_every_plan_belongs_to_the_variant_that_made_it_and_names_its_kernel():
    """The variants' plans partition: the variant a plan's (algorithm, plan) maps back to is the
    one that planned it; its kernel name is one it emits; its estimate a positive time. Every
    variant has plans somewhere on these descriptors and hosts."""
    seen = set()
    for d in DESCS:
        kdesc = pointwise_as_1d(d) or d
        for host in HOSTS:
            for v in variants.VARIANTS:
                plans = v.plans(d, host)
                assert plans[:1] == v.planned(d, host)[:1] or not v.planned(d, host)
                for p in plans:
                    seen.add(v.name)
                    assert variants.variant_of(kdesc, v.algorithm, p) is v
                    if v.algorithm == "blocked":
                        assert v.kind(kdesc, p) in v.emitters
                    t = v.estimate(d, p, host)
                    assert math.isfinite(t) and t > 0
    assert seen == {v.name for v in variants.VARIANTS}


def test_the_choice_is_the_first_of_the_ranked_variants():
    for d in DESCS:
        for host in HOSTS:
            ranked = choice.ranked(d, host)
            times = [t for _, _, t in ranked]
            assert times == sorted(times)
            v, p, _ = ranked[0]
            assert choice.choose(d, host) == (v.algorithm, p)
            assert choice.estimates(d, host)[v.algorithm] == min(times)
            # forced to a family: its fastest variant (a blocked tile where one applies)
            tile = choice.choose(d, host, among="blocked")
            assert tile[1] == choice.blocked_plan(d, host)


class Narrow(variants.Pixels):
    """A new tile for the test: the pixels tile on four lanes, always the cheapest."""

    name = "narrow"
    emitters = {"blocked-narrow": forward.emit}

    def takes(self, desc, plan):
        return super().takes(desc, plan) and plan.lanes == 4

    def kind(self, desc, plan):
        return "blocked-narrow"

    def _planner(self, kdesc, host):
        return [block_plan(kdesc, host, lanes=4)]

    def _variations(self, kdesc, host):
        return []

    def estimate(self, desc, plan, host, *, parallel=None, costs=None):
        return 0.0


def test_a_new_tile_is_one_class(monkeypatch):
    """Added to VARIANTS and nowhere else, a tile is planned, chosen, a tuner's candidate,
    built, emitted from its key alone and run right."""
    monkeypatch.setattr(variants, "VARIANTS", (Narrow(),) + variants.VARIANTS)
    desc, inputs = conv_case((1, 3, 7, 9), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    desc = desc.canonical()
    host = Host.current()
    algorithm, plan = choice.choose(desc, host)
    assert algorithm == "blocked" and plan.lanes == 4
    assert variants.variant_of(desc, algorithm, plan).name == "narrow"
    assert tune.Candidate("blocked", plan) in tune.candidates(desc, host, "exhaustive")
    op = dml.compile_operator(desc, "cpu", tune="off", parallel=False)
    assert op.kernel.key.kernel == "blocked-narrow"
    assert cpu_conv.emit(op.kernel.key) == op.source
    compare(desc, op(*inputs), dml.compile_operator(desc, "numpy")(*inputs))
