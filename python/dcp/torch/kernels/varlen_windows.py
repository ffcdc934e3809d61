# SPDX-License-Identifier: Apache-2.0
"""Tile masks as FlashAttention windows: the rows and keys of an attention tile, or of several
tiles laid side by side on one key axis, that one varlen sequence with a (left, right) window
computes exactly.

FlashAttention's varlen kernels take one window per call: query i of a sequence of (sq, sk)
tokens attends to keys j with i + sk - sq - left <= j <= i + sk - sq + right and 0 <= j < sk,
where -1 leaves a side unbounded (flash_attn_varlen_func's docstring; is_causal is right = 0).
Within one sequence the key range a row attends to is therefore a single interval whose ends
follow the row: each end is constant or grows by one key per row. dcp's tile masks give any
number of intervals per row; this module finds, for a mask, *segments* (row range, key range,
window) whose windows give back exactly the mask's keys, or says that it cannot in at most
`max_segments`.

Steps (vectorized over a mask's intervals with numpy; host side, once per prepare):
  1. adjacent intervals of a row merge (tiles laid side by side meet at their borders);
  2. the key axis is cut at every gap start of a row with several intervals, so that inside a
     key range between two cuts every row has at most one interval (lambda masks: sink + window
     become two ranges; an arbitrary multi-interval mask gets many cuts and is refused);
  3. inside each key range the rows with an interval split into runs of consecutive rows whose
     starts take steps of 0 then of 1 and whose ends take steps of 1 then of 0 (a window's
     shape); a run's window comes from the rows where its ends move;
  4. a run whose window reaches its whole key range (left or right >= sk) is split where its
     ends start or stop moving: FlashAttention replaces such a window by -1 (unbounded) for
     every sequence of the call (`if window_size_left >= max_seqlen_k: window_size_left = -1`),
     which is not the same mask when sq > sk;
  5. the segments' windows are expanded back to rows and compared with the mask's intervals;
     any difference refuses the mask (the route then runs the Triton kernels), so a mask is
     never computed wrongly, at worst slowly.
Rows without a key belong to no segment: the route writes them itself and never reads what the
kernel returns for a row whose window is empty.
"""
from __future__ import annotations

import numpy as np

# Columns of a segments array (int64 [n, 6]): rows [row_begin, row_end) of the q value, keys
# [key_begin, key_end) of the key axis, and the window; row row_begin + i attends key
# key_begin + j iff j is in the window of (sq, sk) = (row_end - row_begin, key_end - key_begin).
ROW_BEGIN, ROW_END, KEY_BEGIN, KEY_END, LEFT, RIGHT = range(6)
_FIELDS = 6

# Shape classes of a tile (what the kernel selection measures and chooses by).
FULL, CAUSAL, WINDOW, SPLIT, OTHER = "full", "causal", "window", "split", "other"
SHAPES = (FULL, CAUSAL, WINDOW, SPLIT, OTHER)


def tile_intervals(mask_rows: np.ndarray, mask_intervals: np.ndarray, mask: int, q_tokens: int,
                   kv_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, begin, end) int64 arrays of one tile's key intervals, sorted by row then begin,
    from the lowering's CSR mask tables; mask -1 is the full tile."""
    if mask < 0:
        rows = np.arange(q_tokens, dtype=np.int64)
        return rows, np.zeros(q_tokens, np.int64), np.full(q_tokens, kv_tokens, np.int64)
    starts = mask_rows[mask:mask + q_tokens + 1].astype(np.int64)
    rows = np.repeat(np.arange(q_tokens, dtype=np.int64), np.diff(starts))
    pairs = mask_intervals[2 * starts[0]:2 * starts[-1]].astype(np.int64).reshape(-1, 2)
    return rows, pairs[:, 0].copy(), pairs[:, 1].copy()


def _merge_adjacent(rows, begins, ends):
    """Step 1: intervals of a row that meet become one."""
    n = rows.size
    first = np.ones(n, dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (begins[1:] != ends[:-1])
    starts = np.flatnonzero(first)
    lasts = np.append(starts[1:] - 1, n - 1)
    return rows[starts], begins[starts], ends[lasts]


def _pieces(rows, begins, ends):
    """Step 2: the intervals cut at every gap start; (range, row, lo, hi) sorted by range then
    row, and the number of ranges; None if a row has two pieces in one range."""
    gaps = ends[:-1][rows[1:] == rows[:-1]]
    cuts = np.unique(gaps)
    first = np.searchsorted(cuts, begins, side="right")
    last = np.searchsorted(cuts, ends - 1, side="right")
    count = last - first + 1
    source = np.repeat(np.arange(rows.size), count)
    offsets = np.cumsum(count) - count
    ranges = first[source] + (np.arange(source.size) - offsets[source])
    range_lo = np.concatenate(([np.iinfo(np.int64).min], cuts))
    range_hi = np.concatenate((cuts, [np.iinfo(np.int64).max]))
    lo = np.maximum(begins[source], range_lo[ranges])
    hi = np.minimum(ends[source], range_hi[ranges])
    piece_rows = rows[source]
    order = np.lexsort((piece_rows, ranges))
    ranges, piece_rows, lo, hi = ranges[order], piece_rows[order], lo[order], hi[order]
    if np.any((ranges[1:] == ranges[:-1]) & (piece_rows[1:] == piece_rows[:-1])):
        return None
    return ranges, piece_rows, lo, hi, cuts.size + 1


def _run_starts(ranges, rows, lo, hi):
    """Step 3: the first piece of every run (a boolean per piece)."""
    m = rows.size
    start = np.ones(m, dtype=bool)
    if m > 1:
        d_lo, d_hi = np.diff(lo), np.diff(hi)
        same = (ranges[1:] == ranges[:-1]) & (rows[1:] == rows[:-1] + 1)
        steps = same & ((d_lo == 0) | (d_lo == 1)) & ((d_hi == 0) | (d_hi == 1))
        start[1:] = ~steps
        # A start that stops moving (step 1 then 0), or an end that starts moving (0 then 1),
        # would no longer be one window's: the run ends before that step.
        start[2:] |= ((d_lo[:-1] == 1) & (d_lo[1:] == 0)) | ((d_hi[:-1] == 0) & (d_hi[1:] == 1))
    return start


def _windows(rows, lo, hi, start):
    """Each run's segment row and its split points (the first piece whose start moved, the
    first piece whose end stopped moving)."""
    firsts = np.flatnonzero(start)
    lasts = np.append(firsts[1:], rows.size) - 1
    run = np.cumsum(start) - 1
    r0, r1 = rows[firsts], rows[lasts] + 1
    c0, c1 = lo[firsts], hi[lasts]
    # Inside a run starts never fall and ends never fall, so the pieces whose start is still c0
    # and those whose end is still below c1 are each a prefix of the run.
    flat_lo = np.add.reduceat((lo == c0[run]).astype(np.int64), firsts)
    rising_hi = np.add.reduceat((hi < c1[run]).astype(np.int64), firsts)
    moved_lo = firsts + flat_lo  # first piece with lo > c0 (== lasts + 1: none)
    has_left = moved_lo <= lasts
    a = np.where(has_left, lo[np.minimum(moved_lo, lasts)] - rows[np.minimum(moved_lo, lasts)], 0)
    last_rising = firsts + rising_hi - 1
    has_right = rising_hi > 0
    b = np.where(has_right, hi[np.maximum(last_rising, firsts)] - rows[np.maximum(last_rising,
                                                                                  firsts)], 0)
    # Row r of the run attends [max(c0, r + a), min(c1, r + b)); in the segment's coordinates
    # (i = r - r0, j = key - c0) that is the window with these left and right.
    left = np.where(has_left, c1 - r1 - a, -1)
    right = np.where(has_right, b - 1 - c1 + r1, -1)
    segments = np.stack((r0, r1, c0, c1, left, right), axis=1)
    return segments, moved_lo, last_rising + 1, firsts, lasts


def segment_intervals(segments: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, lo, hi): each segment's rows, in order, with the keys [lo, hi) its window gives
    them (on the segments' key axis)."""
    sq = segments[:, ROW_END] - segments[:, ROW_BEGIN]
    sk = segments[:, KEY_END] - segments[:, KEY_BEGIN]
    which = np.repeat(np.arange(segments.shape[0]), sq)
    i = np.arange(which.size) - np.repeat(np.cumsum(sq) - sq, sq)
    left, right = segments[which, LEFT], segments[which, RIGHT]
    base = i + sk[which] - sq[which]
    lo = np.where(left >= 0, np.maximum(0, base - left), 0)
    hi = np.where(right >= 0, np.minimum(sk[which], base + right + 1), sk[which])
    c0 = segments[which, KEY_BEGIN]
    return segments[which, ROW_BEGIN] + i, c0 + lo, c0 + hi


def find_segments(rows: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                  max_segments: int) -> np.ndarray | None:
    """Segments (int64 [n, 6]) giving exactly the keys [begins, ends) of each row (int64
    arrays sorted by row then begin, intervals non-empty and disjoint), at most max_segments of
    them; None if that cannot be done. Rows without an interval are in no segment."""
    if rows.size == 0:
        return np.zeros((0, _FIELDS), dtype=np.int64)
    rows, begins, ends = _merge_adjacent(rows, begins, ends)
    found = _pieces(rows, begins, ends)
    if found is None or found[4] > max_segments:
        return None
    ranges, rows, lo, hi, _ = found
    start = _run_starts(ranges, rows, lo, hi)
    if np.count_nonzero(start) > max_segments:
        return None
    segments, moved_lo, stopped_hi, firsts, lasts = _windows(rows, lo, hi, start)
    sk = segments[:, KEY_END] - segments[:, KEY_BEGIN]
    whole = (segments[:, LEFT] >= sk) | (segments[:, RIGHT] >= sk)
    if whole.any():  # step 4
        extra = np.zeros(rows.size, dtype=bool)
        for points in (moved_lo, stopped_hi):
            inside = whole & (points > firsts) & (points <= lasts)
            extra[points[inside]] = True
        start |= extra
        if np.count_nonzero(start) > max_segments:
            return None
        segments = _windows(rows, lo, hi, start)[0]
        sk = segments[:, KEY_END] - segments[:, KEY_BEGIN]
        if np.any((segments[:, LEFT] >= sk) | (segments[:, RIGHT] >= sk)):
            return None
    # Step 5: the windows give back every piece. Runs are consecutive pieces of consecutive
    # rows, so the expansion lists the pieces in their own order.
    got_rows, got_lo, got_hi = segment_intervals(segments)
    if not (np.array_equal(got_rows, rows) and np.array_equal(got_lo, lo)
            and np.array_equal(got_hi, hi)):
        return None
    return segments


def shape_of(segments: np.ndarray | None) -> str:
    """A tile's shape class from its own segments: full, causal (one bottom-right causal
    window), window (one other window), split (several segments) or other (none found)."""
    if segments is None:
        return OTHER
    if segments.shape[0] > 1:
        return SPLIT
    if segments.shape[0] == 0:  # no row attends to any key: nothing to compute
        return FULL
    left, right = int(segments[0, LEFT]), int(segments[0, RIGHT])
    if left < 0 and right < 0:
        return FULL
    if left < 0 and right == 0:
        return CAUSAL
    return WINDOW


def window_rank(segments: np.ndarray) -> int:
    """Where a tile goes when a q group's tiles are laid side by side on one key axis: tiles
    whose rows' first keys move (the far edge of a window) first, full ones next, the others
    (a causal diagonal, whose rows' last keys move) last, so that neighbours in the sequence
    meet and merge into one window whatever order the plan lists them in."""
    if segments.shape[0] == 1:
        left, right = int(segments[0, LEFT]), int(segments[0, RIGHT])
        if left >= 0 and right < 0:
            return 0
        if left < 0 and right < 0:
            return 1
    return 2
