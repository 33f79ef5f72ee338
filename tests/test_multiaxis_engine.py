"""The multi-axis engine with scripted launches: attribution, ddmin, inner searches."""

from __future__ import annotations

from collections.abc import Callable, Generator

from perfbisect.bisect.engine import LaunchResult, Status
from perfbisect.bisect.multiaxis import AxisPlan, MultiAxisEngine, ddmin, join_set, split_set
from perfbisect.config import Configuration

COMMITS = tuple(f"{i:040x}" for i in range(33))
PATCHES = tuple(f"p{i}.patch@{i:08x}" for i in range(8))


def run(
    good: dict[str, str],
    bad: dict[str, str],
    plans: list[AxisPlan],
    level: Callable[[dict[str, str]], float],
    outlier: Callable[[dict[str, str], int], bool] = lambda config, k: False,
) -> MultiAxisEngine:
    engine = MultiAxisEngine(Configuration.of(good), Configuration.of(bad), plans)
    count: dict[str, int] = {}
    for _ in range(2000):
        batch = engine.next_batch()
        if not batch:
            return engine
        results = []
        for request in batch:
            k = count.get(request.config.fingerprint, 0)
            count[request.config.fingerprint] = k + 1
            value = level(request.config.as_dict()) * (1 + 0.01 * ((k % 3) - 1))
            if outlier(request.config.as_dict(), k):
                value *= 1.8  # a slow outlier launch (throttling, contention)
            results.append(LaunchResult(value))
        engine.feed(results)
    raise AssertionError("did not finish")


def test_ddmin_finds_a_one_minimal_pair() -> None:
    tested: list[list[str]] = []

    def fails(subset: list[str]) -> Generator[list[object], list[object], bool]:
        tested.append(subset)
        return {"c", "f"} <= set(subset)
        yield []  # a generator, like the engine's measuring tests

    gen = ddmin(list("abcdefgh"), fails)  # type: ignore[arg-type]
    try:
        next(gen)
    except StopIteration as stop:
        assert sorted(stop.value) == ["c", "f"]
    else:
        raise AssertionError("the scripted oracle never yields")
    # Repeated subsets are free in the engine (verdicts are cached per configuration).
    assert len({tuple(t) for t in tested}) <= 24


def test_single_culprit_axis_among_three_with_inner_binary_search() -> None:
    plans = [
        AxisPlan("commit", "path", COMMITS),
        AxisPlan("launch", "path", ("tmux", "ssh")),
        AxisPlan("flag", "path", ("a", "b")),
    ]
    engine = run(
        {"commit": COMMITS[0], "launch": "tmux", "flag": "a"},
        {"commit": COMMITS[-1], "launch": "ssh", "flag": "b"},
        plans,
        lambda c: 29.0 if COMMITS.index(c["commit"]) >= 21 else 18.0,
    )
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert engine.culprit_sets == [("commit",)]
    assert outcome.culprit is not None
    assert outcome.culprit.first_bad.config.get("commit") == COMMITS[21]
    assert outcome.culprit.last_good.config.get("commit") == COMMITS[20]
    # k = 3: the endpoints and one configuration per axis, within 2k + 2 evaluations.
    attribution = {row.position for row in engine.attribution} | {0, 1}
    assert len(attribution) <= 2 * 3 + 2


def test_interaction_needs_both_axes() -> None:
    plans = [AxisPlan("commit", "path", COMMITS), AxisPlan("launch", "path", ("tmux", "ssh"))]
    engine = run(
        {"commit": COMMITS[0], "launch": "tmux"},
        {"commit": COMMITS[-1], "launch": "ssh"},
        plans,
        lambda c: 29.0 if c["launch"] == "ssh" and COMMITS.index(c["commit"]) >= 9 else 18.0,
    )
    assert engine.outcome is not None and engine.outcome.status is Status.FOUND
    assert engine.culprit_sets == [("commit", "launch")]
    by_axis = {
        s.last_good.config.differing_axes(s.first_bad.config)[0]: s for s in engine.outcome.steps
    }
    assert by_axis["commit"].first_bad.config.get("commit") == COMMITS[9]
    assert by_axis["commit"].first_bad.config.get("launch") == "ssh"
    assert by_axis["launch"].first_bad.config.get("commit") == COMMITS[-1]


def test_bad_patch_among_eight() -> None:
    full = join_set(PATCHES, PATCHES)
    engine = run(
        {"patches": ""},
        {"patches": full},
        [AxisPlan("patches", "set", ("", full), PATCHES)],
        lambda c: 29.0 if PATCHES[5] in split_set(c["patches"]) else 18.0,
    )
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert split_set(outcome.culprit.first_bad.config.get("patches") or "") == [PATCHES[5]]
    assert split_set(outcome.culprit.last_good.config.get("patches") or "") == []
    assert outcome.culprit.verified


def test_outlier_launches_do_not_steer_attribution_or_ddmin() -> None:
    # The innocent commit axis gets a slow outlier on its first launch alone; the subset
    # {p1, p2} (innocent, needs p5) gets two. Neither may be blamed: a BAD verdict on one launch
    # is re-measured, and a ddmin result is trusted only once its own launches agree.
    plans = [
        AxisPlan("commit", "path", COMMITS),
        AxisPlan("patches", "set", ("", join_set(PATCHES, PATCHES)), PATCHES),
    ]
    culprit = PATCHES[5]
    innocent_pair = join_set(PATCHES[1:3], PATCHES)

    def outlier(config: dict[str, str], k: int) -> bool:
        alone = config["commit"] == COMMITS[-1] and not config["patches"]
        return (alone and k == 0) or (config["patches"] == innocent_pair and k < 2)

    engine = run(
        {"commit": COMMITS[0], "patches": ""},
        {"commit": COMMITS[-1], "patches": join_set(PATCHES, PATCHES)},
        plans,
        lambda c: 29.0 if culprit in split_set(c["patches"]) else 18.0,
        outlier,
    )
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome
    assert engine.culprit_sets == [("patches",)]
    assert outcome.culprit is not None
    assert split_set(outcome.culprit.first_bad.config.get("patches") or "")[-1] == culprit
