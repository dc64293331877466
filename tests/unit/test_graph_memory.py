"""The placement of a compiled graph's intermediate buffers in one arena
(dml_numba.graph.memory): no two buffers alive at once share a byte, a step's output never
shares its inputs' bytes, and buffers whose lives do not overlap do share memory."""
from hypothesis import given, settings
from hypothesis import strategies as st

from dml_numba.graph import memory
from dml_numba.graph.plan import Step, buffer


def step(out, *inputs, more=()):
    """A step writing buffer ``out`` (a node, or ("output", k): a graph output, no buffer) from
    ``inputs`` (nodes, (node, output i) pairs, or ("input", k) refs)."""
    def ref(r):
        if isinstance(r, tuple):  # ("input" or "output", k), or (node, output i) of a buffer
            return r if isinstance(r[0], str) else buffer(*r)
        return buffer(r)

    return Step(None, tuple(ref(r) for r in inputs), ref(out), (), (),
                (), tuple((buffer(*m), ()) for m in more))


def ranges(offsets, nbytes):
    return {k: (off, off + memory._round(max(1, nbytes(k)))) for k, off in offsets.items()}


def check(steps, nbytes):
    """Every invariant of a placement; returns it."""
    offsets, total = memory.place(steps, nbytes)
    life = memory.lifetimes(steps)
    assert set(offsets) == set(life)
    span = ranges(offsets, nbytes)
    for k, (lo, hi) in span.items():
        assert lo % memory.ALIGN == 0 and hi <= total, (k, lo, hi, total)
    keys = sorted(span, key=str)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            (fa, la), (fb, lb) = life[a], life[b]
            if fa <= lb and fb <= la:  # alive at the same step
                (lo_a, hi_a), (lo_b, hi_b) = span[a], span[b]
                assert hi_a <= lo_b or hi_b <= lo_a, (a, b, life[a], life[b], span[a], span[b])
    assert total <= sum(hi - lo for lo, hi in span.values())
    return offsets, total


def test_a_steps_output_never_shares_its_inputs_bytes():
    # node 0 is last read by step 1, which writes node 1: the two are alive at step 1
    steps = [step(0, ("input", 0)), step(1, 0), step(2, 1), step(("output", 0), 2)]
    offsets, _ = check(steps, lambda k: 1024)
    assert offsets[1] != offsets[0] and offsets[2] != offsets[1]


def test_a_buffer_read_later_keeps_its_bytes():
    # node 0 is read by steps 1 and 3: node 1 and node 2, written in between, stay clear of it
    steps = [step(0, ("input", 0)), step(1, 0), step(2, 1), step(("output", 0), 2, 0)]
    offsets, _ = check(steps, lambda k: 1024)
    assert memory.lifetimes(steps)[0] == (0, 3)
    assert offsets[0] not in (offsets[1], offsets[2])


def test_buffers_whose_lives_do_not_overlap_share_memory():
    # a chain of five equal buffers needs two: each one's bytes serve again two steps later
    steps = [step(0, ("input", 0))] + [step(k, k - 1) for k in range(1, 5)] + \
        [step(("output", 0), 4)]
    offsets, total = check(steps, lambda k: 1000)
    assert total == 2 * memory._round(1000)
    assert offsets[0] == offsets[2] == offsets[4] and offsets[1] == offsets[3]


def test_every_output_of_a_step_of_several_outputs_has_its_own_bytes():
    steps = [step(0, ("input", 0), more=[(0, 1)]), step(1, 0, (0, 1)),
             step(("output", 0), 1)]
    offsets, _ = check(steps, lambda k: 512)
    assert len({offsets[0], offsets[(0, 1)], offsets[1]}) == 3


def test_freed_ranges_merge_and_the_end_grows():
    # two small buffers freed side by side serve one buffer of both their sizes; a buffer too
    # big for the free range at the end of the arena grows it rather than starting after it
    small = {0: 256, 1: 256, 9: 256, 2: 512, 3: 2048}
    steps = [step(0, ("input", 0)), step(1, ("input", 0)), step(9, 0, 1), step(2, 9),
             step(3, 2), step(("output", 0), 3)]
    offsets, total = check(steps, lambda k: small[k])
    assert offsets[2] == 0  # the merged range of nodes 0 and 1
    assert offsets[3] == 512 and total == 512 + 2048  # the free 256 bytes at the end, grown


@st.composite
def step_lists(draw):
    """Random step lists: each step reads up to three earlier buffers (or the graph input) and
    writes one buffer, sometimes two, or a graph output."""
    n = draw(st.integers(1, 14))
    steps, alive, sizes = [], [], {}
    for k in range(n):
        reads = draw(st.lists(st.sampled_from(alive), max_size=3, unique=True)) if alive else []
        reads = reads or [("input", 0)]
        if draw(st.integers(0, 5)) == 0:
            steps.append(step(("output", k), *reads))
            continue
        more = [(k, 1)] if draw(st.integers(0, 4)) == 0 else []
        steps.append(step(k, *reads, more=more))
        for key in [k, *more]:
            sizes[key] = draw(st.integers(1, 5000))
            alive.append(key)
    return steps, sizes


@settings(max_examples=200, deadline=None, derandomize=True)
@given(step_lists())
def test_random_step_lists_never_share_bytes_between_buffers_alive_at_once(case):
    steps, sizes = case
    check(steps, lambda k: sizes[k])


def test_a_freed_range_merges_with_the_free_range_after_it_too():
    # node 1's bytes are freed first, node 0's (just before them) next: one range of both
    # (and node 9's after them) serves node 2
    sizes = {0: 256, 1: 256, 9: 256, 8: 1024, 2: 768}
    steps = [step(0, ("input", 0)), step(1, ("input", 0)), step(9, 1), step(8, 0, 9),
             step(2, 8), step(("output", 0), 2)]
    offsets, _ = check(steps, lambda k: sizes[k])
    assert (offsets[0], offsets[1], offsets[9], offsets[8]) == (0, 256, 512, 768)
    assert offsets[2] == 0


def _part(out, whole, at, *inputs):
    """A step writing buffer ``out`` as the part of buffer ``whole`` at byte ``at``."""
    import dataclasses

    return dataclasses.replace(step(out, *inputs), into=(buffer(whole), at))


def test_a_part_sits_in_its_whole_which_lives_from_its_first_part_to_its_last_reader():
    # nodes 1 and 3 are the parts of node 9 (a join done in place); node 2, written between
    # them, and node 4, read with the whole, stay clear of it; node 1 is read again by step 2
    sizes = {0: 512, 1: 1024, 2: 1024, 3: 1024, 9: 2048, 4: 512, 5: 512}
    steps = [step(0, ("input", 0)), _part(1, 9, 0, 0), step(2, 1), _part(3, 9, 1024, 2),
             step(4, ("input", 0)), step(5, 9, 4), step(("output", 0), 5)]
    offsets, total = memory.place(steps, lambda k: sizes[k])
    life = memory.lifetimes(steps)
    assert 1 not in life and 3 not in life and life[9] == (1, 5)
    assert offsets[1] == offsets[9] and offsets[3] == offsets[9] + 1024
    whole = (offsets[9], offsets[9] + 2048)
    for k in (2, 4):  # alive while the whole is: outside it
        assert offsets[k] + sizes[k] <= whole[0] or offsets[k] >= whole[1], k
    assert offsets[0] + sizes[0] <= whole[0] or offsets[0] >= whole[1]  # read by the first part
    assert total >= 2048 + 1024 + 512
