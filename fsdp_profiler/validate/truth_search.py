"""Coarse-to-fine minibatch search of the ground-truth runs. GPU time is scarce, so instead of
measuring every minibatch of a range it measures every `coarse`-th one up to the first that runs
out of memory, then bisects each boundary the coarse pass bracketed: the first minibatch whose
steady-state steps retry cudaMalloc (RETRY or worse) and the first that runs out of memory (OOM).
Levels are assumed to grow with the minibatch; where they do not, the bisection still ends at a
transition between two adjacent sizes, and every measured point is kept for the record.
Pure Python: `measure(mbs)` is whatever runs one point."""

SAFE, RETRY, OOM, ERROR = 0, 1, 2, 3
LEVEL_NAMES = {SAFE: "safe", RETRY: "retry", OOM: "oom", ERROR: "error"}


class StopSearch(Exception):
    """Raised by a `measure` callback to end the search early (time budget spent)."""


def level_of(point):
    """A measured point's level: OOM if any step ran out of memory, RETRY if the steps after the
    first retried cudaMalloc, SAFE otherwise; ERROR if the point failed for another reason."""
    if point.get("error"):
        return ERROR
    if point.get("oom"):
        return OOM
    if point.get("retries_per_step", 0) > 0:
        return RETRY
    return SAFE


def search(lo, hi, coarse, measure, max_points=64):
    """Measures minibatches in [lo, hi]; returns {mbs: level} in the order measured. Stops at an
    ERROR point, after `max_points` points, or when `measure` raises StopSearch."""
    if not 1 <= lo <= hi or coarse < 1:
        raise ValueError(f"search: expected 1 <= lo <= hi and coarse >= 1 (got {lo}, {hi}, {coarse})")
    levels = {}

    class _Done(Exception):
        pass

    def m(x):
        if x not in levels:
            if len(levels) >= max_points:
                raise _Done()
            try:
                levels[x] = measure(x)
            except StopSearch:
                raise _Done() from None
            if levels[x] == ERROR:
                raise _Done()
        return levels[x]

    try:
        x = lo
        while x <= hi:
            if m(x) == OOM:
                break
            if x == hi:
                break
            x = min(x + coarse, hi)
        for target in (RETRY, OOM):
            at_least = [k for k, v in levels.items() if v >= target]
            if not at_least:
                continue
            above = min(at_least)
            below_ones = [k for k, v in levels.items() if v < target and k < above]
            if not below_ones:
                continue
            below = max(below_ones)
            while above - below > 1:
                mid = (below + above) // 2
                if m(mid) >= target:
                    above = mid
                else:
                    below = mid
    except _Done:
        pass
    return levels


def boundaries(levels):
    """(max_safe, first_retry, first_oom, exact) from {mbs: level}, as `mlprio-fsdp sweep`
    defines them: max_safe is the largest SAFE minibatch below the first non-SAFE one (0: none),
    first_retry the first RETRY minibatch below the first OOM (0: none), first_oom the first OOM
    minibatch (0: none measured). `exact` says whether each boundary found lies between adjacent
    measured sizes (a bisection that finished), so the numbers are exact, not bracketed."""
    pts = sorted((k, v) for k, v in levels.items() if v != ERROR)
    first_bad = next((k for k, v in pts if v != SAFE), 0)
    first_oom = next((k for k, v in pts if v == OOM), 0)
    first_retry = next((k for k, v in pts if v == RETRY and (not first_oom or k < first_oom)), 0)
    safe_below = [k for k, v in pts if v == SAFE and (not first_bad or k < first_bad)]
    max_safe = max(safe_below) if safe_below else 0
    exact = True
    keys = [k for k, _ in pts]
    for b in (first_bad, first_oom):
        if b and b != keys[0]:
            prev = max(k for k in keys if k < b)
            exact = exact and prev == b - 1
    return max_safe, first_retry, first_oom, exact
