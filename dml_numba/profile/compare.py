"""Two profiles side by side: ``dml-numba profile --compare BASE.json [NEW.json]``.

Rows are matched by workload, implementation and dtype. A change is marked only where it exceeds
the spread of both runs: the medians differ by more than either run's interquartile range (so two
runs of the same code on a quiet machine mark nothing), as pyperf's ``compare_to`` marks only
significant differences. Where the cpu device ran another variant (the automatic choice went
parallel in one run and serial in the other), the change says so. Rows from a profile written
before samples were kept (schema 1) have no spread: their ratio is shown, never marked. Rows
found in one file only are listed. The exit status is 1 when a row is marked slower by more
than the threshold, for CI, unless either run was busy (:func:`busy`): such a verdict cannot be
trusted, is said to be so, and fails only where asked (``--fail-when-busy``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Change:
    workload: str
    impl: str
    dtype: str
    base_s: float
    new_s: float
    marked: bool  # outside the spread of both runs
    base_spread: float | None  # IQR relative to the median
    new_spread: float | None
    variants: tuple = (None, None)  # what the cpu device ran in each (parallel, serial, ...)

    @property
    def ratio(self) -> float:
        """New time over base time: above 1 is slower."""
        return self.new_s / self.base_s

    @property
    def verdict(self) -> str:
        if not self.marked:
            text = "within the spread" if self.base_spread is not None else "no spread recorded"
        else:
            text = (f"{self.ratio:.2f}x slower" if self.ratio > 1 else
                    f"{1 / self.ratio:.2f}x faster")
        if self.variants[0] != self.variants[1]:
            text += f" (ran {self.variants[0]}, now {self.variants[1]})"
        return text


def _key(row: dict) -> tuple:
    return row["workload"], row["impl"], row.get("dtype")


def _iqr(row: dict) -> float | None:
    if row.get("q1_s") is None or row.get("q3_s") is None or (row.get("n") or 0) < 3:
        return None
    return row["q3_s"] - row["q1_s"]


def compare(base: dict, new: dict) -> list[Change]:
    """A change per row present in both profiles (JSON dicts), in the new profile's order."""
    old = {_key(r): r for r in base["rows"]}
    out = []
    for r in new["rows"]:
        b = old.get(_key(r))
        if b is None or not b.get("steady_s") or not r.get("steady_s"):
            continue
        ib, inew = _iqr(b), _iqr(r)
        diff = abs(r["steady_s"] - b["steady_s"])
        marked = ib is not None and inew is not None and diff > ib and diff > inew
        out.append(Change(r["workload"], r["impl"], r.get("dtype"), b["steady_s"],
                          r["steady_s"], marked,
                          ib / b["steady_s"] if ib is not None else None,
                          inew / r["steady_s"] if inew is not None else None,
                          (b.get("variant"), r.get("variant"))))
    return out


def unmatched(base: dict, new: dict) -> tuple[list, list]:
    """Rows (workload, impl, dtype) found in the base profile only, and in the new one only."""
    a, b = {_key(r) for r in base["rows"]}, {_key(r) for r in new["rows"]}
    return ([k for k in dict.fromkeys(_key(r) for r in base["rows"]) if k not in b],
            [k for k in dict.fromkeys(_key(r) for r in new["rows"]) if k not in a])


def busy(profile: dict) -> list[str]:
    """Why a profile's timings cannot be trusted: its warnings that say the machine was busy
    or rows had the CPU taken away, or, for a file without warnings, how many of its rows are
    flagged busy (empty: nothing says so)."""
    said = [w.split(";")[0] for w in profile.get("warnings") or []
            if isinstance(w, str) and ("busy" in w or "CPU taken away" in w)]
    if said:
        return said
    flagged = [r for r in profile["rows"] if "busy" in (r.get("flags") or ())]
    return [f"{len(flagged)} rows flagged busy"] if flagged else []


def regressions(changes: list[Change], threshold: float) -> list[Change]:
    """Rows marked slower by more than ``threshold`` (0.05: 5%)."""
    return [c for c in changes if c.marked and c.ratio > 1 + threshold]


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def table(changes: list[Change], markdown: bool = False) -> str:
    cols = ["workload", "impl", "base ms", "IQR %", "new ms", "IQR %", "new/base", "change"]
    rows = [[c.workload, c.impl, f"{c.base_s * 1e3:.3f}", _pct(c.base_spread),
             f"{c.new_s * 1e3:.3f}", _pct(c.new_spread), f"{c.ratio:.2f}",
             ("**" + c.verdict + "**" if markdown else "* " + c.verdict) if c.marked
             else c.verdict] for c in changes]
    if markdown:
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"
    widths = [max(len(str(x)) for x in [col] + [r[i] for r in rows]) for i, col in
              enumerate(cols)]
    widths[0], widths[1] = min(widths[0], 44), min(widths[1], 26)

    def line(vals):
        return " ".join((str(v)[:w].ljust(w) if i in (0, 1, 7) else str(v).rjust(w))
                        for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    head = line(cols)
    return "\n".join([head, "-" * len(head)] + [line(r) for r in rows])


def summary(changes: list[Change]) -> str:
    marked = [c for c in changes if c.marked]
    slower = sum(c.ratio > 1 for c in marked)
    return (f"{_rows(len(changes))} compared: {len(marked)} changed beyond the spread of both runs "
            f"({slower} slower, {len(marked) - slower} faster), "
            f"{len(changes) - len(marked)} within it")
