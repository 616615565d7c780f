"""Rows of the results table: median with min–max over the runs, a ratio to a reference.

Every figure is a list of per-run values. A ratio is computed per run when the reference was
measured in the same run (paired), so machine noise that slows both sides cancels; the table
shows its median and range too.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

EXPECTED_ROWS = ("1", "2h", "2", "3a", "3b", "4", "5h", "5", "6", "7", "8a", "8b", "8c", "10")
"""Every row key the table holds (the smoke test checks each one is there)."""


@dataclass
class Row:
    key: str
    title: str
    unit: str
    values: list[float]
    reference_title: str = ""
    reference: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    target: str = ""
    """Human form of the target (``≤ 2×``); empty when the issue sets none."""
    limit: tuple[str, float] | None = None
    """``("<=", 2.0)`` or ``(">=", 0.5)``, checked against the median ratio (or value, see ``on``)."""
    on: str = "ratio"
    note: str = ""

    def met(self) -> str:
        if self.limit is None:
            return "–"
        op, bound = self.limit
        subject = self.ratios if self.on == "ratio" else self.values
        if not subject:
            return "–"
        m = statistics.median(subject)
        ok = m <= bound if op == "<=" else m >= bound
        return "yes" if ok else "**no**"


def paired(values: list[float], reference: list[float]) -> list[float]:
    return [v / r for v, r in zip(values, reference, strict=True) if r]


def spread(values: list[float], unit: str = "", digits: int = 3) -> str:
    if not values:
        return "–"
    med, lo, hi = statistics.median(values), min(values), max(values)
    suffix = "" if not unit else unit if unit in ("×", "/s") else f" {unit}"
    if len(values) == 1:
        return f"{_num(med, digits)}{suffix}"
    return f"{_num(med, digits)}{suffix} ({_num(lo, digits)}–{_num(hi, digits)})"


def _num(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def table(rows: list[Row]) -> str:
    lines = [
        "| # | measurement | shelly-dist: median (min–max) | reference: median (min–max) | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: EXPECTED_ROWS.index(r.key) if r.key in EXPECTED_ROWS else 99):
        ref = f"{r.reference_title}: {spread(r.reference, r.unit)}" if r.reference else r.reference_title or "–"
        ratio = spread(r.ratios, "×") if r.ratios else "–"
        title = f"{r.title}<br>_{r.note}_" if r.note else r.title
        lines.append(f"| {r.key} | {title} | {spread(r.values, r.unit)} | {ref} | {ratio} | {r.target or '–'} "
                     f"| {r.met()} |")
    return "\n".join(lines)
