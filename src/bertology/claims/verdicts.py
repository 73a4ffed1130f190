"""A claim's verdict and the few interval rules every verdict function shares.

A verdict is one of three words, always with its reason and numbers:

* **holds**: the 95% interval of the statistic excludes the null in the direction the claim predicts;
* **does not hold**: the interval excludes the claimed effect (it lies at or beyond the null on the other side);
* **cannot tell**: the interval covers both, or the test does not apply to this model or run (no masked-LM
  head, one language, a section that did not run, an experiment no capability runs yet).

Numbers are fractions for accuracies and shares (``unit="fraction"``, shown as percent), differences of
fractions (``unit="points"``, shown as percentage points) or plain numbers (``unit="number"``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

HOLDS = "holds"
FAILS = "does not hold"
UNKNOWN = "cannot tell"
VERDICTS = (HOLDS, FAILS, UNKNOWN)
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Verdict:
    """One claim judged on one model's result tables.

    ``value``: the statistic; ``baseline`` (``baseline_name``): what it is compared with; ``ci_low`` and
    ``ci_high``: its interval (``interval`` says which: a 95% CI, a range over random draws...; empty with
    the reason when the tables give none); ``evidence``: the report anchor of the table it reads."""

    claim: str
    verdict: str
    reason: str
    value: float | None = None
    baseline: float | None = None
    baseline_name: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    interval: str = "95% CI"
    unit: str = "fraction"
    evidence: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}; expected one of {VERDICTS}")
        for name in ("value", "baseline", "ci_low", "ci_high"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or math.isnan(float(value))):
                object.__setattr__(self, name, None if value is None or _nan(value) else float(value))
            elif value is not None:
                object.__setattr__(self, name, float(value))

    def as_dict(self) -> dict:
        return asdict(self)


def _nan(value) -> bool:
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def missing(claim: str, why: str, evidence: str = "") -> Verdict:
    """``cannot tell`` because the run holds no table to judge the claim on (``why`` says which and how to get it)."""
    return Verdict(claim, UNKNOWN, why, interval="", evidence=evidence)


def decide(low: float | None, high: float | None, null: float, greater: bool = True) -> str:
    """The verdict of an interval ``[low, high]`` against ``null`` when the claim predicts a value above it
    (``greater``) or below it: holds when the interval excludes the null on the claimed side, does not hold when
    it lies at or beyond the null on the other side, cannot tell when it covers the null (or is missing)."""
    if low is None or high is None or _nan(low) or _nan(high) or _nan(null):
        return UNKNOWN
    if greater:
        return HOLDS if low > null else FAILS if high <= null else UNKNOWN
    return HOLDS if high < null else FAILS if low >= null else UNKNOWN


def binomial_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p`` over ``n`` examples (sound near 0 and 1 and for small
    ``n``, where the normal approximation collapses to a point)."""
    if n is None or _nan(n) or n <= 0 or _nan(p):
        return (math.nan, math.nan)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def bonferroni_z(tests: int) -> float:
    """The two-sided 95% normal quantile corrected for ``tests`` comparisons (Bonferroni)."""
    return NormalDist().inv_cdf(1 - 0.025 / max(1, tests))
