"""The statistics of timed samples: median, interquartile range, and a confidence interval.

Pure Python and deterministic, so a reader recomputes exactly what the writer computed
from the raw samples a measured row carries (judge.py).

The interval is the distribution-free one for a median: with n samples sorted, the
median lies between the j-th smallest and the j-th largest with probability
1 - 2·P(Binomial(n, 1/2) <= j - 1), whatever the distribution of the times. Timing noise
is skewed (a preempted round is slow, nothing is ever faster than the hardware allows),
so no normal approximation is assumed. Ratios are taken round by round (the kernel's
sample of a round over its reference's sample of the same round), which cancels drift
that the two share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The fewest timed rounds a measured row may rest on: the timer takes at least this many, and
# the judge refuses a row with fewer (its interval would say more than the samples do).
MIN_ROUNDS = 10

CONFIDENCE = 0.95
MIN_SAMPLES_FOR_INTERVAL = 6  # fewer: no 95% interval exists (2 · 0.5^5 > 0.05)


def median(samples) -> float:
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def quantile(samples, q: float) -> float:
    """Linear interpolation between order statistics (numpy's default method)."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def iqr(samples) -> float:
    return quantile(samples, 0.75) - quantile(samples, 0.25)


def median_interval(samples, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The distribution-free confidence interval of the median, or None when too few samples."""
    ordered = sorted(samples)
    n = len(ordered)
    tail = (1 - confidence) / 2
    j, cumulative = 0, 0.0  # j: how many order statistics each end may drop
    for k in range(n):
        cumulative += math.comb(n, k) / 2 ** n
        if cumulative > tail:
            break
        j = k + 1
    if j == 0:
        return None
    return ordered[j - 1], ordered[n - j]


def paired_ratios(numerator, denominator) -> list[float]:
    """Round-by-round ratios of two sample lists timed in the same rounds."""
    if len(numerator) != len(denominator):
        raise ValueError(f"{len(numerator)} samples cannot be paired with {len(denominator)}")
    if any(d <= 0 for d in denominator):
        raise ValueError("a reference sample is not positive")
    return [n / d for n, d in zip(numerator, denominator)]


@dataclass(frozen=True)
class Summary:
    median: float
    iqr: float
    interval: tuple[float, float] | None
    rounds: int

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width over the median (inf without an interval)."""
        if self.interval is None or self.median <= 0:
            return math.inf
        return (self.interval[1] - self.interval[0]) / 2 / self.median


def summarize(samples) -> Summary:
    samples = list(samples)
    return Summary(median(samples), iqr(samples), median_interval(samples), len(samples))
