"""Golden generated sources: every kernel the test catalogue, the blocked kernels' cases, the
profiler's workloads and long strided rows make (a SHA-256 a kernel, ``catalogue.sha256``) and a
handful of representative kernels at realistic sizes in full (``*.py`` here), generated for one
fixed host (16-lane vectors, two threads) so that they are the same on every machine. A
refactor of an emitter proves it changed nothing by leaving these unchanged
(``tests/test_golden.py``); a deliberate change regenerates them:

    python3 -m tests.golden --write

and the diff of the ``*.py`` files shows what the change does to generated code.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).parent
HOST = (16, 2)  # lanes of the widest float32 vector, threads


@contextmanager
def emit_only():
    """Kernels chosen and their sources generated, nothing compiled (the library's choose
    stage: ``dml_numba._diskcache.choosing``), planned for :data:`HOST`."""
    from dml_numba._diskcache import choosing
    from dml_numba.cpu import _emit as cpu_emit

    with choosing(), cpu_emit.planned_for(cpu_emit.Host(*HOST)):
        yield


def _cpu_sources(out: dict, prefix: str, canon, kind: str) -> None:
    """Every CPU kernel ``canon`` makes (``kind``: "conv" for convolution, whose every
    algorithm that takes it is generated; any other operator through its lowering), both
    variants."""
    import dml_numba as dml
    from dml_numba._registry import get_lowering
    from dml_numba.cpu import convolution as cc

    for par in (False, True):
        if kind == "conv":
            for algo in (None, "direct", "gemm", "blocked", "winograd"):
                try:
                    k = cc.make_kernel(canon, {"algorithm": algo, "parallel": par})
                except dml.ValidationError:
                    continue
                out[f"{prefix}/{algo}/{par}"] = k.source
        else:
            out[f"{prefix}/{par}"] = get_lowering(type(canon), "cpu")(
                canon, {"parallel": par}).source


def _cuda_sources(out: dict, prefix: str, canon) -> None:
    """Every CUDA kernel ``canon`` makes (each option set of its lowering)."""
    import dml_numba.cuda as dc

    for opts in dc.kernel_variants(canon):
        tag = json.dumps(opts, sort_keys=True, separators=(",", ":"))
        out[f"{prefix}/{tag}"] = dc.kernel_for(canon, **opts).source


def _cpu_catalogue(out: dict) -> None:
    import dml_numba as dml
    from tests.cases import catalogue

    for name, (desc, _) in catalogue().items():
        _cpu_sources(out, f"cpu/{name}", dml._api.packed(desc.canonical()), name[:4])


def _blocked_cases(out: dict) -> None:
    from tests.ops import test_convolution_blocked as tb

    for table in ("SHAPES", "TRANSPOSED", "DEPTHWISE"):
        for name, args in getattr(tb, table).items():
            desc, _ = tb.conv_case(*args)
            for lanes, budget in [(4, 4), (8, 12), (16, 24)]:
                out[f"blocked/{table}/{name}/{lanes}x{budget}"] = tb.blocked_kernel(
                    desc, lanes, budget, False).source
    for name in tb.SHAPES:
        desc, _ = tb.conv_case(*tb.SHAPES[name])
        out[f"blocked/staged/{name}"] = tb.blocked_kernel(desc, 8, 12, True, staged=True).source
    for name, args in tb.FLAT.items():
        desc, _ = tb.conv_case(*args)
        for lanes in (4, 8):
            for staged in (False, True):
                out[f"blocked/flat/{name}/{lanes}/{staged}"] = tb.blocked_kernel(
                    desc, lanes, 12, False, staged=staged, flat_gain=100.0).source


def _workloads(out: dict) -> None:
    """The profiler's workloads at their realistic sizes (quick suite), on the CPU and CUDA:
    rows long enough for the vector and row-wise paths the tiny catalogue shapes never take."""
    import numpy as np

    import dml_numba as dml
    from dml_numba.workloads import suite

    rng = np.random.default_rng(0)
    kinds = {"convolution": "conv"}
    for w in suite(True):
        name = w.name.replace(" ", "_")  # the catalogue file splits its lines at spaces
        desc, _ = w.make(np.dtype(np.float32), rng)
        canon = dml._api.packed(desc.canonical())
        _cpu_sources(out, f"workload/cpu/{name}", canon, kinds.get(w.op, "data"))
        _cuda_sources(out, f"workload/cuda/{name}", canon)


def _strided_rows(out: dict) -> None:
    """Slices whose last axis is read with a stride, rows long enough for vector reads (the
    shuffled strides), 1-D to 4-D, every dtype width, on the CPU."""
    import numpy as np

    import dml_numba as dml
    from dml_numba.cpu._emit import SHUFFLED_STRIDES

    for dtype in ("float32", "float16", "float64", "int8"):
        for rank in (1, 2, 4):
            for step in sorted(SHUFFLED_STRIDES):
                shape = (2, 3, 5, 131 * abs(step))[-rank:]
                x = np.empty(shape, dtype)
                offsets, sizes = (0,) * rank, shape
                strides = (1,) * (rank - 1) + (step,)
                desc = dml.functional.slice1_desc(x, offsets, sizes, strides)
                _cpu_sources(out, f"strided/{dtype}/{rank}d/{step}",
                             dml._api.packed(desc.canonical()), "data")


def _cuda_catalogue(out: dict) -> None:
    import dml_numba as dml
    from tests.cases import catalogue

    for name, (desc, _) in catalogue().items():
        _cuda_sources(out, f"cuda/{name}", dml._api.packed(desc.canonical()))


def _conv(xs, ws, s=(1, 1), p=(1, 1), g=1, direction=0, dtype="float32"):
    """A convolution descriptor at a realistic size (no arrays)."""
    import numpy as np

    import dml_numba as dml

    x, w = np.empty(xs, dtype), np.empty(ws, dtype)
    b = np.empty((1, ws[0] if direction == 0 else ws[1] * g, 1, 1), dtype)
    return dml.functional.convolution_desc(x, w, b, s, None, p, p, None, g, 1, direction,
                                           dml.ActivationReluOperatorDesc())


def _chain():
    """Reflection padding, every other row and column, tiled 2 x 2: one fused gather."""
    import numpy as np

    import dml_numba as dml
    from dml_numba.functional import padding_desc, slice1_desc, tile_desc

    p = padding_desc(np.empty((2, 4, 64, 64), np.float32), (0, 0, 4, 4), (0, 0, 4, 4),
                     "reflection")
    s = slice1_desc(np.empty(p.output.sizes, np.float32), (0, 0, 0, 0), p.output.sizes,
                    (1, 1, 2, 2))
    t = tile_desc(np.empty(s.output.sizes, np.float32), (1, 1, 2, 2))
    return dml.GatherChainDesc(p.input_tensor, t.output_tensor, (p, s, t))


#: the representative blocked kernels are named for their tile: the algorithm is forced (the
#: automatic choice is the catalogue's to check), the tile the cost model's pick of the
#: planner's, or the one ``PIXELS`` names: the planner's pixels tile
BLOCKED = {"algorithm": "blocked"}
PIXELS = {"algorithm": "blocked", "plan": "pixels"}


def representative() -> dict:
    """name -> (descriptor, options, device): the kernels kept in full."""
    return {
        "cpu_gather_chain": (_chain(), {}, "cpu"),
        "cuda_gather_chain": (_chain(), {}, "cuda"),
        "cpu_depthwise_3x3_reflection_folded": (_conv((8, 64, 56, 56), (64, 1, 3, 3), g=64),
                                                {"input_padding": "REFLECTION",
                                                 "algorithm": "blocked"}, "cpu"),
        "cpu_dense_3x3_flat_staged": (_conv((8, 64, 56, 56), (64, 64, 3, 3)), PIXELS, "cpu"),
        "cpu_dense_3x3_channels_staged": (_conv((8, 64, 56, 56), (64, 64, 3, 3)), BLOCKED,
                                          "cpu"),
        "cpu_strided_3x3s2": (_conv((8, 64, 56, 56), (128, 64, 3, 3), s=(2, 2)), BLOCKED, "cpu"),
        "cpu_grouped_3x3": (_conv((8, 256, 28, 28), (256, 32, 3, 3), g=8), BLOCKED, "cpu"),
        "cpu_depthwise_3x3": (_conv((8, 64, 56, 56), (64, 1, 3, 3), g=64), BLOCKED, "cpu"),
        "cpu_transposed_4x4s2": (_conv((8, 64, 28, 28), (64, 32, 4, 4), s=(2, 2), direction=1),
                                 BLOCKED, "cpu"),
        "cpu_pointwise_1x1": (_conv((8, 256, 28, 28), (128, 256, 1, 1), p=(0, 0)), BLOCKED,
                              "cpu"),
        "cpu_float16_3x3": (_conv((1, 16, 20, 20), (16, 16, 3, 3), dtype="float16"), BLOCKED,
                            "cpu"),
        "cpu_direct_3x3": (_conv((1, 8, 20, 20), (8, 8, 3, 3)), {"algorithm": "direct"}, "cpu"),
        "cpu_gemm_3x3": (_conv((1, 8, 20, 20), (8, 8, 3, 3)), {"algorithm": "gemm"}, "cpu"),
        "cpu_winograd_3x3": (_conv((8, 64, 56, 56), (64, 64, 3, 3)), {"algorithm": "winograd"},
                             "cpu"),
        "cuda_implicit_gemm_3x3": (_conv((8, 64, 56, 56), (64, 64, 3, 3)),
                                   {"algorithm": "tiled"}, "cuda"),
    }


def representative_sources() -> dict:
    from dml_numba._registry import lowering_for

    out = {}
    for name, (desc, opts, device) in representative().items():
        if opts.get("plan") == "pixels":
            from dml_numba.cpu import convolution as cc

            opts = {k: v for k, v in opts.items() if k != "plan"}
            tile = cc.block_plan(cc.pointwise_as_1d(desc) or desc)
            out[name] = cc.build(desc, {"parallel": None, **opts}, "blocked", tile).source
        elif device == "cpu":
            out[name] = lowering_for(type(desc), "cpu")(desc, {"parallel": None, **opts}).source
        else:
            import dml_numba.cuda as dc

            out[name] = dc.kernel_for(desc, **opts).source
    return out


def catalogue_sources() -> dict:
    out: dict = {}
    _cpu_catalogue(out)
    _blocked_cases(out)
    _cuda_catalogue(out)
    _workloads(out)
    _strided_rows(out)
    return out


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def generate() -> tuple[dict, dict]:
    """(catalogue digests by id, representative sources by name), for :data:`HOST`."""
    with emit_only():
        return ({k: digest(v) for k, v in sorted(catalogue_sources().items())},
                representative_sources())


def stored() -> tuple[dict, dict]:
    digests = dict(line.split() for line in (HERE / "catalogue.sha256").read_text().splitlines())
    return digests, {p.stem: p.read_text() for p in HERE.glob("*.py") if p.stem[0] != "_"}


def write() -> None:
    digests, sources = generate()
    (HERE / "catalogue.sha256").write_text("".join(f"{k} {v}\n" for k, v in digests.items()))
    for p in HERE.glob("*.py"):
        if p.stem[0] != "_":
            p.unlink()
    for name, source in sources.items():
        (HERE / f"{name}.py").write_text(source)
