"""Least-squares fits shared by the harness (capacity searches, calibration) and `analysis`
(memory fits): part of the foundation both may import. Framework-free."""

from __future__ import annotations

from collections.abc import Sequence


def linear_fit(batches: Sequence[float], values: Sequence[float]) -> tuple[float, float, float]:
    """(fixed, per_sample, r2) of values = fixed + per_sample * batch, by least squares."""
    import numpy as np

    x, y = np.asarray(batches, dtype=float), np.asarray(values, dtype=float)
    per_sample, fixed = np.polyfit(x, y, 1)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((y - fixed - per_sample * x) ** 2).sum()) / total if total > 0 else 1.0
    return float(fixed), float(per_sample), r2
