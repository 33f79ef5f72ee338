"""The machine's state over the launch order, for the search's model (model.py): normal, or
busy, following a Markov chain. Half of the busy periods keep one slow-down factor (a grid over
1.3-3x) while they last; in the other half each launch draws its own factor from that grid.
Three chains are weighed by how well each explains the launches: a quiet machine (periods
rare), a shared one (periods start after about one launch in twenty and last about ten) and
one busy most of the time, launch by launch.

The forward algorithm gives each hypothesis' likelihood (vectorised over chains, level shifts
and gaps); forward-backward gives each launch's state given every launch, before and after it,
from which each launch's probability of having run slow. Pure numpy, no I/O.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

# (start, stay, prior weight): a quiet machine, a shared one whose busy periods last ~12, and
# one busy most of the time, launch by launch (another job's load on and off between launches:
# 6 launches in 10 slow, each its own factor; without it, a machine slow two launches in three
# read its slow launches as levels and named a wrong step at > 99.9% in 14 of 40 such worlds).
# The third is a rare machine (2%): at 10% it explained stretches of busy periods slowed
# launch by launch, and the load table's wrong names at >= 99% there rose from 3 to 10 of 2000.
CHAINS = ((0.002, 0.5, 0.49), (0.05, 0.92, 0.49), (0.6, 0.6, 0.02))
SHARED = 1  # the chain the planner reads a pair's chance of a state change from
SWITCH = 0.05  # a busy launch's chance of a factor other than the one before it
# The share of busy periods whose launches are each slowed by a factor of their own (another
# job's load that varies launch by launch) rather than by one factor for the whole period.
UNSTEADY = 0.5
# The busy states' slow-downs (log-spaced): another job's share of the machine slows it by 1.3x
# or more; less than that is a level's business (a plateau, creep), not the machine's.
BUSY_LO, BUSY_HI = 1.3, 3.0
_K = 12
_F = np.linspace(math.log(BUSY_LO), math.log(BUSY_HI), _K)
_BUSY_SPREAD = 0.5 * (_F[1] - _F[0])  # half the grid's spacing, added to the noise
# Machine states: 0 normal, 1.._K busy with one factor each, the last busy launch by launch.
_STATES = _K + 2


def _busy_share(start: float, stay: float) -> float:
    """A chain's stationary share of busy launches."""
    return start / (1 - stay + start)


def _transitions() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per chain: the transition matrix (states x states) and the first launch's state."""
    mats, inits = [], []
    steady = slice(1, _K + 1)
    for start, stay, _ in CHAINS:
        m = np.zeros((_STATES, _STATES))
        m[0, 0] = 1 - start
        m[0, steady] = start * (1 - UNSTEADY) / _K
        m[0, -1] = start * UNSTEADY
        m[1:, 0] = 1 - stay
        m[steady, steady] = stay * SWITCH / (_K - 1)
        np.fill_diagonal(m[steady, steady], stay * (1 - SWITCH))
        m[-1, -1] = stay
        mats.append(m)
        busy = _busy_share(start, stay)
        inits.append(
            np.concatenate([[1 - busy], np.full(_K, busy * (1 - UNSTEADY) / _K), [busy * UNSTEADY]])
        )
    return np.asarray(mats), np.asarray(inits)


_TRANS, _INIT = _transitions()
_CHAIN_PRIOR = np.log(np.asarray([w for _, _, w in CHAINS]))
# The chains busy most of the time (more than half of their launches slow); they come last.
BUSY_MOST = np.asarray([_busy_share(start, stay) >= 0.5 for start, stay, _ in CHAINS])
# The chains a search weighs are the first ``chains`` of CHAINS: all, or those whose load
# comes in periods (the multi-axis search's: with the third it named 5 wrong steps at >= 99%
# in 2100 busy worlds against 1 without it; docs/benchmarks.md, "A machine busy most ...").
IN_PERIODS = int(np.sum(~BUSY_MOST))
assert not BUSY_MOST[:IN_PERIODS].any(), "the chains busy most of the time come last"


def _forward(
    emit_below: NDArray[np.float64],
    emit_past: NDArray[np.float64],
    idx: NDArray[np.int64],
    gaps: int,
    filtered: list[NDArray[np.float64]] | None = None,
    chains: int = len(CHAINS),
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The forward algorithm for every chain, level shift and gap at once (emissions per
    shift, launch and state): the log-likelihood per (chain, shift, gap) and the last
    launch's filtered state per (chain, shift, gap); each launch's, appended to
    ``filtered`` when given."""
    with _one_thread():
        return _forward_pass(emit_below, emit_past, idx, gaps, filtered, chains)


def _one_thread() -> threadpool_limits:
    """This process's BLAS at one thread while a pass runs: its matrix products are small (rows
    x 14 states), and a pool's threads cost more than they give, the more so where other
    processes share the cores (a search of 163 launches: 66 s on two idle cores and 120 s on
    two busy ones against 58 s on one thread)."""
    return threadpool_limits(limits=1, user_api="blas")


def _forward_pass(
    emit_below: NDArray[np.float64],
    emit_past: NDArray[np.float64],
    idx: NDArray[np.int64],
    gaps: int,
    filtered: list[NDArray[np.float64]] | None,
    chains: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    js = np.arange(1, gaps + 1)
    past = idx[None, :] >= js[:, None]  # (gap, launch): the launch's point is past
    h, d = chains, emit_below.shape[0]
    alpha = np.broadcast_to(_INIT[:h, None, None, :], (h, d, gaps, _STATES)).copy()
    loglik = np.zeros((h, d, gaps))
    for t in range(len(idx)):
        scale, top = _emit_at(emit_below, emit_past, past, t)
        if t > 0:
            alpha = _step(alpha, _TRANS[:h])
        f = alpha * scale[None]
        c = f.sum(axis=3)
        loglik += np.log(c) + top[None]
        alpha = f / c[..., None]
        if filtered is not None:
            filtered.append(alpha)
    return loglik, alpha


def _step(states: NDArray[np.float64], trans: NDArray[np.float64]) -> NDArray[np.float64]:
    """One launch's transition for every (chain, shift, gap) at once: ``states`` (chain, shift,
    gap, state) times each chain's matrix, one matrix product per chain (einsum's generic loop
    for the same sum took 60% of a long search's time)."""
    h, d, g, k = states.shape
    rows = np.matmul(states.reshape(h, d * g, k), trans)
    return np.asarray(rows.reshape(h, d, g, k), dtype=np.float64)


def _emit_at(
    emit_below: NDArray[np.float64],
    emit_past: NDArray[np.float64],
    past: NDArray[np.bool_],
    t: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Launch ``t``'s emissions per (shift, gap, state), its point below or past per gap, as
    exp(emission - top) and top (per shift and gap: the largest over the states, log). Both
    are computed for the two sides and picked per gap: the same numbers as computed per gap,
    whose exponentials were a fifth of a search's time."""
    scaled, tops = [], []
    for emit in (emit_past, emit_below):
        e = emit[:, t, :]
        top = e.max(axis=1, keepdims=True)
        scaled.append(np.exp(e - top))
        tops.append(top)
    side = past[:, t]
    scale = np.where(side[None, :, None], scaled[0][:, None, :], scaled[1][:, None, :])
    return np.asarray(scale, dtype=np.float64), np.where(side[None, :], tops[0], tops[1])


def _machine_states(
    emit_below: NDArray[np.float64],
    emit_past: NDArray[np.float64],
    idx: NDArray[np.int64],
    gaps: int,
    chains: int,
) -> NDArray[np.float64]:
    """Forward-backward: each launch's machine state per (chain, shift, gap) given every
    launch, before and after it (launch, chain, shift, gap, state)."""
    filtered: list[NDArray[np.float64]] = []
    with _one_thread():
        _forward_pass(emit_below, emit_past, idx, gaps, filtered, chains)
        return _backward(emit_below, emit_past, idx, gaps, filtered, chains)


def _backward(
    emit_below: NDArray[np.float64],
    emit_past: NDArray[np.float64],
    idx: NDArray[np.int64],
    gaps: int,
    filtered: list[NDArray[np.float64]],
    chains: int,
) -> NDArray[np.float64]:
    """The backward pass over the forward pass's filtered states: each launch's state given
    every launch (launch, chain, shift, gap, state)."""
    past = idx[None, :] >= np.arange(1, gaps + 1)[:, None]
    beta = np.ones_like(filtered[-1])
    out = [filtered[-1]]
    for t in range(len(idx) - 1, 0, -1):
        step = np.asarray(
            beta * _emit_at(emit_below, emit_past, past, t)[0][None], dtype=np.float64
        )
        beta = _step(step, _TRANS[:chains].transpose(0, 2, 1))
        beta = beta / beta.sum(axis=3, keepdims=True)
        post = filtered[t - 1] * beta
        out.append(post / post.sum(axis=3, keepdims=True))
    return np.asarray(out[::-1])


def _slow_launches(
    emit: tuple[NDArray[np.float64], NDArray[np.float64]],
    outlier: tuple[NDArray[np.float64], NDArray[np.float64]],
    idx: NDArray[np.int64],
    gaps: int,
    weight: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Each launch's probability of having run slow (a busy state, or a lone outlier in the
    normal one), over every chain, shift and gap by ``weight`` (their posterior: its first
    axis the chains weighed)."""
    # (launch, chain, shift, gap, state)
    states = _machine_states(emit[0], emit[1], idx, gaps, weight.shape[0])
    past = idx[None, :] >= np.arange(1, gaps + 1)[:, None]  # (gap, launch)
    # (launch, shift, gap): the outlier share on the side the launch's point is, per gap
    share = np.exp(np.where(past.T[:, None, :], outlier[1].T[:, :, None], outlier[0].T[:, :, None]))
    per = (1 - states[..., 0]) + states[..., 0] * share[:, None]
    return np.asarray(np.einsum("thdg,hdg->t", per, weight), dtype=np.float64)
