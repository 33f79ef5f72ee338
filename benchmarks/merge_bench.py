"""Merge benchmark: a regression planted inside a merged branch of a REAL repository's history,
found by perfbisect with and without the search inside merges, and by `git bisect run`.

The history is a real one (default: psf/requests, whose main line is a chain of --no-ff merges
of pull-request branches, some of them long-lived, with merges inside). Each trial picks a
first-parent merge of a branch of at least ``--min-commits`` commits in a window of the main
line, and a commit the merge brought in (any non-merge commit of ``M^1..M^2``, so it may sit on
a branch merged into the branch) as the culprit. A commit measures slow when it contains the
culprit (the culprit is its ancestor or itself), else fast; every launch draws its value from
search_bench.py's noise model (4% launch-to-launch shift, 3% outlier launches 1.5-2x slower,
40 cycles of 1 ms jitter; 18 ms fast, 29 ms slow).

- perfbisect, merges not descended (``--no-descend-merges``): the engine on the first-parent
  path; it can name the merge, never the commit inside.
- perfbisect: the same, then ``perfbisect.bisect.session.merges.descend`` (the session's own code) on
  the same simulated machine: the commit inside.
- git bisect run: real `git bisect` (``--no-checkout``) on a clone of the repository, with a
  script that launches once per commit git asks about and compares with the threshold from
  one launch of each endpoint (the usual threshold script; 2 launches counted for it).

Counted: *right commit* = the culprit named; *right merge* = the first-parent commit that
brought it in named (perfbisect's first answer); launches per search.

    python benchmarks/merge_bench.py --repo /path/to/requests.git [--trials 30] [--seed 1]
        [--window 400] [--min-commits 5] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfbisect.bisect.session.driver import EarlierLaunches, _Searcher
from perfbisect.bisect.session.engines import make_engine
from perfbisect.bisect.session.merges import descend
from perfbisect.bisect.values import LaunchResult, Policy, Status
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.targets.gitrepo import GitRepo

sys.path.insert(0, str(Path(__file__).parent))
from search_bench import BAD_MS, GOOD_MS, World


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass(frozen=True)
class Trial:
    good: str
    bad: str
    merge: str  # the first-parent commit that brought the culprit into the main line
    culprit: str
    nested: bool  # the culprit sits on a branch merged into the merged branch
    slow: frozenset[str]  # every commit that contains the culprit (up to bad)
    seed: int


class Machine:
    """One simulated machine for one search: a commit's launch is slow when it contains the
    culprit; the noise model and its state (outliers, busy periods) run on across the search's
    phases. ``load``: a machine whose load comes and goes (search_bench.py's busy periods:
    after about one launch in twenty, 5-20 launches in a row 1.5-3x slower)."""

    def __init__(self, trial: Trial, load: bool = False) -> None:
        self.trial = trial
        self.world = World([GOOD_MS, BAD_MS], frozenset(), 1, random.Random(trial.seed))
        if load:
            self.world = replace(
                self.world, burst_p=0.05, burst=(1.5, 3.0), burst_len=(5, 20), burst_steady=True
            )
        self.launches = 0

    def launch(self, sha: str) -> float:
        self.launches += 1
        value = self.world.launch(1 if sha in self.trial.slow else 0)
        assert value is not None
        return value


class SimRunner:
    """The driver's part for a benchmark: runs a searcher's launches on the machine, with the
    same reuse of earlier phases' launches for the search inside a merge."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.seq = 0
        self.own: EarlierLaunches[float] = EarlierLaunches({})
        self.done: list[tuple[str, float]] = []  # (fingerprint, value) per launch

    def run(self, searcher: _Searcher) -> None:
        while batch := searcher.next_batch():
            results = []
            for request in batch:
                self.seq += 1
                earlier = self.own.take(request)
                sha = str(request.config.get(COMMIT_AXIS))
                value = earlier if earlier is not None else self.machine.launch(sha)
                self.done.append((request.config.fingerprint, value))
                results.append(LaunchResult(value))
            searcher.feed(results)
            searcher.take_verdicts()

    def reuse_own_before(self, before_seq: int) -> None:
        pool: dict[str, list[float]] = {}
        for fingerprint, value in self.done[: max(0, before_seq)]:  # -1: none
            pool.setdefault(fingerprint, []).append(value)
        self.own = EarlierLaunches(pool)


@dataclass(frozen=True)
class Result:
    commit_right: bool
    merge_right: bool | None  # None: the strategy names no first-parent merge (git bisect)
    launches: int
    # A commit named that is not the culprit (inside the merge, or the first-parent answer
    # where the search inside named none): a wrong answer, not an incomplete one.
    wrong: bool = False


def run_perfbisect(
    repo: GitRepo, trial: Trial, descend_merges: bool, engine: str = "model", load: bool = False
) -> Result:
    machine = Machine(trial, load)
    runner = SimRunner(machine)
    path = [
        Configuration.of({COMMIT_AXIS: sha})
        for sha in repo.first_parent_path(trial.good, trial.bad)
    ]
    policy = Policy()
    searcher = make_engine(path, None, policy, None, engine)
    runner.run(searcher)
    outcome = searcher.outcome
    assert outcome is not None
    named = (
        outcome.culprit.first_bad.config.get(COMMIT_AXIS)
        if outcome.status is Status.FOUND and outcome.culprit
        else None
    )
    inside = None
    if descend_merges:
        for d in descend(runner, repo, outcome, len(path), policy, engine):
            o = d.outcome
            if d.found and o is not None and o.culprit is not None:
                inside = o.culprit.first_bad.config.get(COMMIT_AXIS)
    final = inside or named
    return Result(
        final == trial.culprit, named == trial.merge, machine.launches, wrong(repo, trial, final)
    )


def wrong(repo: GitRepo, trial: Trial, named: str | None) -> bool:
    """A commit named that is no step of the regression: a step is the culprit or a merge that
    brought it in (it holds the culprit, its first parent does not), so a merge named where the
    search inside it ended unresolved is an incomplete answer, not a wrong one."""
    if named is None:
        return False
    parents = repo.parents(named)
    return not (named in trial.slow and (not parents or parents[0] not in trial.slow))


JUDGE = r"""
import json, subprocess, sys
state = json.load(open(sys.argv[1]))
sha = subprocess.run(["git", "rev-parse", "BISECT_HEAD"], capture_output=True, text=True,
                     check=True).stdout.strip()
n = int(open(state["counter"]).read())
open(state["counter"], "w").write(str(n + 1))
value = (state["slow_values"] if sha in state["slow"] else state["fast_values"])[n]
sys.exit(1 if value > state["threshold"] else 0)
"""


def run_git_bisect(clone: Path, trial: Trial, work: Path, load: bool = False) -> Result:
    """Real `git bisect run` on the same DAG: one launch per commit it asks about, against the
    threshold from one launch of each endpoint."""
    # The k-th launch's value, fast or slow, from the same noise model (and the same busy
    # periods): the draws do not depend on the level, so both are drawn from one state.
    world = Machine(trial, load).world
    fast, slow = [], []
    for _ in range(80):
        saved = world.rng.getstate()
        busy = (list(world.launches), list(world.burst_left), list(world.burst_factor))
        fast.append(world.launch(0))
        world.rng.setstate(saved)
        world.launches[:], world.burst_left[:], world.burst_factor[:] = busy
        slow.append(world.launch(1))
    good_v, bad_v = fast[0], slow[1]  # the endpoints' launches: the first two
    counter = work / "counter"
    counter.write_text("2")
    state = {
        "slow": sorted(trial.slow),
        "fast_values": fast,
        "slow_values": slow,
        "threshold": (float(good_v or 0) + float(bad_v or 0)) / 2,
        "counter": str(counter),
    }
    (work / "state.json").write_text(json.dumps(state))
    (work / "judge.py").write_text(JUDGE)
    env = {**os.environ, "GIT_DIR": str(clone)}

    def g(*args: str) -> str:
        return subprocess.run(
            ["git", *args], env=env, cwd=work, check=True, capture_output=True, text=True
        ).stdout

    g("bisect", "reset")
    g("bisect", "start", "--no-checkout", trial.bad, trial.good)
    out = g("bisect", "run", sys.executable, str(work / "judge.py"), str(work / "state.json"))
    g("bisect", "reset")
    first = next(
        (line.split()[0] for line in out.splitlines() if line.endswith("is the first bad commit")),
        None,
    )
    return Result(first == trial.culprit, None, int(counter.read_text()), first != trial.culprit)


def trials(repo: Path, n: int, seed: int, window: int, min_commits: int) -> list[Trial]:
    rng = random.Random(seed)
    mainline = git(repo, "rev-list", "--first-parent", "HEAD").split()
    out: list[Trial] = []
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        start = rng.randint(1, len(mainline) - window - 1)
        bad, good = mainline[start], mainline[start + window]
        merges = []
        for m in mainline[start : start + window]:
            parents = git(repo, "rev-list", "--parents", "-n1", m).split()[1:]
            if len(parents) == 2:
                base = git(repo, "merge-base", parents[0], parents[1])
                count = int(
                    git(repo, "rev-list", "--first-parent", "--count", f"{base}..{parents[1]}")
                )
                if count >= min_commits:
                    merges.append((m, parents))
        if not merges:
            continue
        m, parents = rng.choice(merges)
        brought = git(repo, "rev-list", "--no-merges", f"{parents[0]}..{parents[1]}").split()
        if not brought:
            continue
        culprit = rng.choice(brought)
        slow = set(git(repo, "rev-list", "--ancestry-path", f"{culprit}..{bad}").split())
        slow.add(culprit)
        on_path = [c for c in reversed(mainline[start : start + window + 1]) if c in slow]
        if not on_path or good in slow:
            continue
        line = set(git(repo, "rev-list", "--first-parent", f"{parents[0]}..{parents[1]}").split())
        out.append(
            Trial(
                good,
                bad,
                on_path[0],
                culprit,
                culprit not in line,
                frozenset(slow),
                rng.randrange(2**31),
            )
        )
    return out


def table(rows: Sequence[tuple[str, list[Result]]], markdown: bool) -> None:
    head = ("strategy", "right commit", "right merge", "wrong commit", "launches mean", "max")
    lines = [head]
    for name, results in rows:
        n = len(results)
        lines.append(
            (
                name,
                f"{sum(r.commit_right for r in results)}/{n}",
                f"{sum(bool(r.merge_right) for r in results)}/{n}"
                if results[0].merge_right is not None
                else "n/a",
                f"{sum(r.wrong for r in results)}/{n}",
                f"{statistics.mean(r.launches for r in results):.1f}",
                str(max(r.launches for r in results)),
            )
        )
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git directory (bare or .git)")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=400, help="first-parent commits searched")
    parser.add_argument("--min-commits", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--engine",
        default="model",
        help="model, rules, or both (model,rules): the session's engine, inside merges too",
    )
    parser.add_argument(
        "--load",
        action="store_true",
        help="on a machine whose load comes and goes (busy periods 1.5-3x, 5-20 launches)",
    )
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    engines = args.engine.split(",")
    picked = trials(repo, args.trials, args.seed, args.window, args.min_commits)
    inside = [len(t.slow) for t in picked]
    print(
        f"{repo.name if repo.name != 'repo' else repo.parent.name}: {len(picked)} trials, "
        f"window {args.window} first-parent commits, merges of >= {args.min_commits}-commit "
        f"branches, seed {args.seed}; commits slow per trial: median {statistics.median(inside)}; "
        f"{sum(t.nested for t in picked)} culprits on a branch merged into the merged branch"
    )
    results: dict[str, list[Result]] = {}
    for kind in engines:
        results[f"perfbisect --engine {kind} (--no-descend-merges)"] = []
        results[f"perfbisect --engine {kind}"] = []
    results["git bisect run (1 launch)"] = []
    with tempfile.TemporaryDirectory() as tmp:
        # a clone of its own (a bare one with its config: GitPython and `git bisect` want one)
        clone = Path(tmp) / "clone.git"
        subprocess.run(
            ["git", "clone", "-q", "--bare", "--shared", str(repo), str(clone)], check=True
        )
        git_repo = GitRepo(clone)
        for t in picked:
            for kind in engines:
                results[f"perfbisect --engine {kind} (--no-descend-merges)"].append(
                    run_perfbisect(git_repo, t, False, kind, args.load)
                )
                results[f"perfbisect --engine {kind}"].append(
                    run_perfbisect(git_repo, t, True, kind, args.load)
                )
            results["git bisect run (1 launch)"].append(
                run_git_bisect(clone, t, Path(tmp), args.load)
            )
    table(list(results.items()), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
