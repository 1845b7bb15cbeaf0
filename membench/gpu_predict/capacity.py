"""A card's capacity from predictions alone: the largest batch whose predicted figure fits.

What fits, per framework, as the suite's GPU cells run it:
  - torch: the caching allocator capped at the card's memory less the process's overhead
    (overhead.py) runs the step without an out-of-memory (the replay frees cached segments
    and retries, as the allocator does, before it gives up); under a capacity budget, capped
    at the budget's enforced limit;
  - JAX (a framework whose predictor compiles the step: compiled_capacity): the compiled
    step's buffers within XLA's allocator limit (the JAX backend's
    MEM_FRACTION of the card: what the suite's GPU cells give it), or a budget's limit.
torch's predictor searches in its own process (two traces give every storage's bytes at any
batch, so the search replays instead of tracing; the answer is traced again to check). JAX
compiles at two batches, then steps by lines through its compiles (secants, then the
bracket's ends, stepping up from the fit where XLA's peak is flat under a limit) until the
boundary lies between two compiled batches: a compile at the answer and one at the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from membench.gpu_predict.cards import Card
from membench.gpu_predict.run import PredictionUnavailable, request_for, run_predictor

FIRST_BATCHES = (8, 32)  # JAX's first two compiles (multiples of the step)
# a search's compiles beyond its first two (the H200's 24 GiB JAX ResNet-50 accumulate-4 row
# took 16: XLA's peak flat over 1,284-1,776 samples as it rematerialises to fit)
MAX_COMPILES = 24
STALL = 3  # one bracket end kept this many compiles running: the line is no guide
GALLOP = 64  # the first step up from a fit past a stall: this share of its batch


@dataclass
class CardAnswer:
    workload: str
    framework: str
    strategy: str
    card: str
    limit_bytes: int
    status: str  # ok, unsupported, error
    reason: str = ""
    batch: int | None = None
    at_answer: dict[str, Any] = field(default_factory=dict)  # predicted figures there
    next_batch: dict[str, Any] = field(default_factory=dict)  # and at the next batch
    predictions: int = 0  # traces or compiles it took
    seconds: float = 0.0


def torch_limit(c: Card, overhead_bytes: float) -> int:
    """The reserve a torch process may reach on the card: its memory less the overhead."""
    return int(c.memory_bytes - overhead_bytes)


def torch_capacities(
    cell: dict[str, Any], targets: list[tuple[Card, int]], max_batch: int, step: int
) -> list[CardAnswer]:
    """Each (card, limit)'s answer from one predictor process: its traces serve every card."""
    answers = [_answer(cell, c, limit) for c, limit in targets]
    search = {
        "max_batch": max_batch, "step": step,
        "targets": [[limit, list(c.compute_capability)] for c, limit in targets],
    }  # fmt: skip
    try:
        out = run_predictor("torch", request_for(cell, targets[0][0], None) | {"search": search})
    except PredictionUnavailable as exc:
        for answer in answers:
            answer.status, answer.reason = "unsupported", str(exc)
        return answers
    for i, answer in enumerate(answers):
        answer.status, answer.reason = out["status"], out.get("reason", "")
        if answer.status != "ok":
            continue
        found = out["answers"][i]
        answer.batch = found["batch"]
        answer.at_answer = found.get("at_answer") or {}
        answer.next_batch = found.get("next") or {}
        answer.predictions = found.get("traces", 0)
        answer.seconds = out.get("seconds", 0.0)
    return answers


def compiled_capacities(
    cell: dict[str, Any], targets: list[tuple[Card, int]], max_batch: int, step: int
) -> list[CardAnswer]:
    """Each (card, limit)'s answer, the smallest limit first: where a card's compiles cross
    the next card's limit is where that card's search compiles first (a guess only: each
    answer lies between two compiles for its own card)."""
    order = sorted(range(len(targets)), key=lambda i: targets[i][1])
    answers: dict[int, CardAnswer] = {}
    start = None
    for n, i in enumerate(order):
        c, limit = targets[i]
        answers[i] = compiled_capacity(cell, c, limit, max_batch, step, start)
        if n + 1 < len(order):
            seen = answers[i].at_answer.get("compiled") or {}
            start = first_batches(seen, targets[order[n + 1]][1], step, max_batch // step * step)
    return [answers[i] for i in range(len(targets))]


def first_batches(
    compiled: dict[int, float], limit: int, step: int, top: int
) -> tuple[int, int] | None:
    """Two batches around where these compiles' peaks, joined by lines (the last two's
    beyond them), reach the limit; None where they do not rise to it."""
    points = sorted(compiled.items())
    if len(points) < 2:
        return None
    # the first pair that reaches the limit, else the last pair
    k = next((k for k in range(1, len(points)) if points[k][1] >= limit), len(points) - 1)
    crossing = _crossing(*points[k - 1], *points[k], limit)
    if crossing is None:
        return None
    guess = min(top, max(step, int(crossing) // step * step))
    second = min(top, guess + max(step, guess // 32 // step * step))
    return (guess, second) if second > guess else (max(step, guess - step), guess)


def compiled_capacity(
    cell: dict[str, Any], c: Card, limit: int, max_batch: int, step: int,
    start: tuple[int, int] | None = None,
) -> CardAnswer:  # fmt: skip
    """The card's largest batch whose compiled step fits the limit; the first two compiles at
    start (default FIRST_BATCHES)."""
    answer = _answer(cell, c, limit)
    compiled: dict[int, dict[str, Any]] = {}

    def peak(batch: int) -> float | None:
        if batch not in compiled:
            request = request_for({**cell, "batch_size": batch}, c, limit)
            out = run_predictor(cell["framework"], request)
            answer.predictions += 1
            answer.seconds += out.get("seconds") or 0.0
            if out["status"] != "ok":
                answer.status, answer.reason = out["status"], out.get("reason", "")
                return None
            compiled[batch] = out
        return compiled[batch]["allocated_bytes"]

    try:
        lo, hi = (max(step, b // step * step) for b in start or FIRST_BATCHES)
        p_lo, p_hi = peak(lo), peak(hi)
    except PredictionUnavailable as exc:
        answer.status, answer.reason = "unsupported", str(exc)
        return answer
    if p_lo is None or p_hi is None:
        return answer
    top = max_batch // step * step

    def fits(batch: int) -> bool | None:
        p = peak(batch)
        return None if p is None else p <= limit

    # each next compile where a line crosses the limit: through the last two compiles while
    # no bracket is known (a secant: XLA's peak is close to a line away from the limit), then
    # through the bracket's ends (regula falsi: under a limit XLA's peak is flat, then steep,
    # as it rematerialises to fit); where the non-fit has stayed STALL compiles running (the
    # line, drawn from a far non-fit, keeps landing in the flat part), steps up from the fit
    # that double (the wall lies near where the flat part ends); the bracket's midpoint
    # where the line crosses outside it or the fit stays, only, as assumed, monotone
    # in batches: good fits (0: none known), bad does not (past top: none known)
    first = [(b, p) for b, p in ((lo, p_lo), (hi, p_hi)) if b <= top]
    good = max([b for b, p in first if p <= limit], default=0)
    bad = min([b for b, p in first if p > limit], default=top + step)
    kept, stays = "", 0  # the bracket's end the last compiles left in place, how many running
    gallop = 0  # the last step up from the fit
    for _ in range(MAX_COMPILES):
        if bad - good <= step:
            break
        ends = [good, bad] if good in compiled and bad in compiled else None
        secant = _secant(compiled, limit, good, bad, step, top, ends) if stays < STALL else None
        midpoint = max(good + step, (good + bad) // 2 // step * step)
        if secant is not None:
            batch = secant
        elif bad > top:  # no non-fit known, the line no guide: double
            batch = min(top, max(2 * good, good + step))
        elif kept == "bad":
            gallop = 2 * gallop if gallop else max(step, good // GALLOP // step * step)
            batch = min(good + gallop, midpoint)
        else:
            batch = midpoint
        ok = fits(batch)
        if ok is None:
            return answer
        side = ("bad" if ok else "good") if ends else ""  # the bracket's end that stays
        gallop = gallop if ok else 0
        stays = stays + 1 if side and side == kept else int(bool(side))
        kept = side
        good, bad = (batch, bad) if ok else (good, batch)
    if bad - good > step:  # (the last compile allowed may be the one that closes it)
        answer.status, answer.reason = "error", f"no boundary within {MAX_COMPILES} compiles"
        answer.at_answer = {"compiled": {b: c["allocated_bytes"] for b, c in compiled.items()}}
        return answer  # the compiles in their order: what the search saw
    answer.status, answer.batch = "ok", good
    answer.at_answer = {"allocated_bytes": compiled[good]["allocated_bytes"]} if good else {}
    if bad in compiled:
        answer.next_batch = {"allocated_bytes": compiled[bad]["allocated_bytes"]}
    answer.at_answer["compiled"] = {b: c["allocated_bytes"] for b, c in sorted(compiled.items())}
    return answer


def _secant(
    compiled: dict[int, dict[str, Any]], limit: int, good: int, bad: int, step: int, top: int,
    through: list[int] | None = None,
) -> int | None:  # fmt: skip
    """The batch (a multiple of step) where the line through two compiles (these batches, else
    the last two) reaches the limit, inside the bracket (good, bad); None where the line
    crosses outside it."""
    pair = through or list(compiled)[-2:]
    (b1, p1), (b2, p2) = ((b, compiled[b]["allocated_bytes"]) for b in pair)
    crossing = _crossing(b1, p1, b2, p2, limit)
    if crossing is None:
        return None
    if crossing < good or (bad <= top and crossing >= bad):
        return None
    batch = math.floor(min(crossing, top) / step) * step
    return min(max(batch, good + step), bad - step)


def _crossing(b1: int, p1: float, b2: int, p2: float, limit: float) -> float | None:
    """Where the line through (b1, p1) and (b2, p2) reaches the limit; None where it does not
    rise."""
    slope = (p2 - p1) / (b2 - b1)
    return None if slope <= 0 else b1 + (limit - p1) / slope


def _answer(cell: dict[str, Any], c: Card, limit: int) -> CardAnswer:
    return CardAnswer(cell["workload"], cell["framework"], cell["strategy"], c.name, limit, "error")
