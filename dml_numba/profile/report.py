"""A profile's outputs: the table, CSV, Markdown, JSON (docs/PROFILE.md) and the chart."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import sys
import textwrap

from . import machine

SCHEMA = 2
BASELINE = "numpy"  # the device every speed-up is measured against


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.enabled = total, 0, enabled
        self.tty = sys.stderr.isatty()

    def step(self, label: str):
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            sys.stderr.write("\r" + line[:110].ljust(110))
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _first(r) -> str:
    if r.first_call_s is None:
        return ""
    kind = r.first_call if r.first_call not in (None, "none", "peer") else ""
    return f"{r.first_call_s * 1e3:.1f}ms {kind}".rstrip()


def columns(r) -> dict:
    """One row as the table, CSV and Markdown show it (times in ms)."""
    return {
        "workload": r.workload,
        "impl": r.label,
        "first call": _first(r),
        "median ms": f"{r.steady_s * 1e3:.3f}",
        "IQR %": f"{100 * r.spread:.1f}",
        "samples x loops": f"{r.n}x{r.loops}",
        "throughput": f"{r.throughput:.2f} {r.throughput_unit}",
        "vs numpy device": f"{r.speedup_vs_numpy:.2f}x" if r.speedup_vs_numpy else "",
        "of copy": f"{r.of_limit:.2f}" if r.of_limit else "",
        "notes": " ".join(r.flags),
    }


def table(rows, warnings=()) -> str:
    """The terminal table (the workload named once per group), then any warnings."""
    widths = {"workload": 44, "impl": 26, "first call": 18, "median ms": 10, "IQR %": 6,
              "samples x loops": 15, "throughput": 17, "vs numpy device": 15}
    show_copy = any(r.of_limit for r in rows)
    if show_copy:
        widths["of copy"] = 7
    widths["notes"] = 0

    def line(values):
        out = []
        for name, w in widths.items():
            v = values[name]
            if name == "notes":
                out.append(v)
            else:
                out.append(v[:w].ljust(w) if name in ("workload", "impl") else v.rjust(w))
        return " ".join(out).rstrip()

    head = line({k: k for k in widths})
    lines, last = [head, "-" * len(head)], None
    for r in rows:
        values = columns(r)
        if r.workload == last:
            values["workload"] = ""
        last = r.workload
        lines.append(line(values))
    lines += [f"warning: {w}" for w in warnings]
    return "\n".join(lines)


def not_run(meta: dict) -> str:
    """One line naming the peers that did not run and why (empty when all did)."""
    why: dict = {}
    for _, peer, reason in meta.get("not_run", []):
        why.setdefault((peer, reason), 0)
        why[(peer, reason)] += 1
    return "; ".join(f"{peer} on {n} workloads: {reason}" for (peer, reason), n in why.items())


def to_csv(rows) -> str:
    """Every row with its numbers unformatted (seconds), one line a row."""
    buf = io.StringIO()
    fields = ["op", "workload", "impl", "variant", "kind", "dtype", "shape", "first_call",
              "first_call_s", "steady_s", "q1_s", "q3_s", "min_s", "n", "loops", "cpu_share",
              "throughput", "throughput_unit", "speedup_vs_numpy", "of_limit", "flags"]
    writer = csv.DictWriter(buf, fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        d = {k: getattr(r, k) for k in fields}
        d["shape"] = "x".join(map(str, r.shape))
        d["flags"] = " ".join(r.flags)
        writer.writerow(d)
    return buf.getvalue()


def to_markdown(rows, meta=None, warnings=()) -> str:
    """A GitHub table (pasteable into an issue or RESULTS.md), the machine under it."""
    cols = ["workload", "impl", "first call", "median ms", "IQR %", "samples x loops",
            "throughput", "vs numpy device", "notes"]
    if any(r.of_limit for r in rows):
        cols.insert(-1, "of copy")
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        v = columns(r)
        out.append("| " + " | ".join(v[c].replace("|", "\\|") for c in cols) + " |")
    if meta:
        out += ["", machine.caption(meta)]
    out += [f"\n**warning**: {w}" for w in warnings]
    return "\n".join(out) + "\n"


def as_dict(rows, meta: dict, warnings=()) -> dict:
    return {"schema": SCHEMA, "meta": meta, "warnings": list(warnings),
            "rows": [dataclasses.asdict(r) for r in rows]}


def write_json(rows, path, meta: dict | None = None, warnings=()) -> None:
    with open(path, "w") as f:
        json.dump(as_dict(rows, meta or {}, warnings), f, indent=1)


#: what --compare reads of a row: the name fields (strings) and the numbers (finite, not
#: negative; each may be absent or null: a row that did not run, a schema 1 file's quartiles)
_ROW_TEXT = ("workload", "impl")
_ROW_NUMBERS = ("steady_s", "q1_s", "q3_s", "n")


def _bad_row(r) -> str | None:
    """Why row ``r`` of a profile file cannot be compared (None: it can)."""
    import math

    if not isinstance(r, dict):
        return f"a {type(r).__name__}; expected an object"
    for k in _ROW_TEXT:
        if not isinstance(r.get(k), str):
            return f"{k} is {r.get(k)!r}; expected a string" if k in r else f"no {k!r}"
    for k in _ROW_NUMBERS:
        v = r.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v) or v < 0):
            return f"{k} is {v!r}; expected a finite number, not negative"
    if not isinstance(r.get("flags", []), list) or not isinstance(r.get("dtype", ""),
                                                                     (str, type(None))):
        return "flags or dtype of the wrong type"
    return None


def read_json(path) -> dict:
    """A profile written by any version (schema 1 had no samples, first-call kind or flags)."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path}: not a dml-numba profile (no 'rows' list)")
    for i, r in enumerate(data["rows"]):
        why = _bad_row(r)
        if why:
            raise ValueError(f"{path}: row {i}: {why}")
    if not isinstance(data.get("warnings", []), list):
        raise ValueError(f"{path}: 'warnings' is {type(data['warnings']).__name__}; expected "
                         "a list")
    data.setdefault("schema", 1)
    data.setdefault("meta", {})
    return data


def plot(rows, path, meta: dict | None = None, warnings=()) -> None:
    """:func:`figure`, written to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = figure(rows, meta, warnings)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(rows, meta: dict | None = None, warnings=()):
    """Horizontal bars per workload: each implementation's speed-up over the vectorised numpy
    device, its value (and the cpu variant) written on it; a peer of the workload that did not
    run gets a slot marked "n/a" and why. What the table marks, the chart marks: a flagged row's
    bar is hatched and its flags (busy, unstable, tick) follow its value, and the warnings
    under the table are printed in the figure, so the picture read alone says what to
    distrust."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = meta or {}
    workloads = list(dict.fromkeys(r.workload for r in rows))
    not_run = [m for m in meta.get("not_run", []) if m[0] in workloads]
    impls = list(dict.fromkeys([r.impl for r in rows if r.kind != "limit"] +
                               [m[1] for m in not_run]))
    colors = {impl: plt.get_cmap("tab10")(j % 10) for j, impl in enumerate(impls)}
    height, y, ticks = 0.8, 0.0, []
    fig_rows = sum(len([r for r in rows if r.workload == wl and r.kind != "limit"]) +
                   len([m for m in not_run if m[0] == wl]) + 1 for wl in workloads)
    # the warnings under the table, each once, then the advice they share, below the axes
    said = list(dict.fromkeys(w.split("; ")[0] for w in warnings))
    advice = list(dict.fromkeys(w.split("; ", 1)[1] for w in warnings if "; " in w))
    notes = [line for w in said for line in textwrap.wrap("warning: " + w, 160)]
    notes += [line for a in advice for line in textwrap.wrap(a, 160)]
    line_in = 0.14  # inches a line of 7-point text takes
    fig_h = 0.24 * fig_rows + 2 + line_in * len(notes)
    fig, ax = plt.subplots(figsize=(12, fig_h))
    labelled = set()
    for wl in workloads:
        top = y
        for r in (r for r in rows if r.workload == wl and r.kind != "limit"):
            if r.speedup_vs_numpy:
                name = "vectorised (numpy device)" if r.impl == BASELINE else r.impl
                bar = ax.barh([y], [r.speedup_vs_numpy], height=height, color=colors[r.impl],
                              label=None if r.impl in labelled else name,
                              hatch="////" if r.flags else None,
                              edgecolor="black" if r.flags else None)
                labelled.add(r.impl)
                ax.bar_label(bar, [f"{r.speedup_vs_numpy:.2f}x" +
                                   (f" {r.variant}" if r.variant else "") +
                                   (f" [{', '.join(r.flags)}]" if r.flags else "")],
                             fontsize=6, padding=2, color="firebrick" if r.flags else "black")
            y += 1
        for _, peer, why in (m for m in not_run if m[0] == wl):
            ax.text(1.0, y, f" {peer}: n/a ({why})"[:80], va="center", fontsize=6,
                    color="grey")
            y += 1
        ticks.append((top + y - 1) / 2)
        y += 1
    ax.set_yticks(ticks)
    ax.set_yticklabels(workloads, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up over the vectorised numpy device (median of calibrated samples, "
                  "log scale); the cpu bars name the variant that ran")
    flagged = sum(bool(r.flags) for r in rows if r.kind != "limit")
    ax.set_title(f"dml_numba profile ({rows[0].dtype if rows else ''})" +
                 (f": {flagged} rows flagged (hatched), see below" if flagged else ""),
                 color="firebrick" if flagged or warnings else "black")
    if notes:
        fig.text(0.01, 0.2 / fig_h, "\n".join(notes), fontsize=7, color="firebrick",
                 va="bottom", linespacing=1.3)
    if meta:
        fig.text(0.01, 0.005, machine.caption(meta), fontsize=7, color="dimgrey")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout(rect=(0, (0.25 + line_in * len(notes)) / fig_h, 1, 1))
    return fig
