"""Launches as Slurm jobs (``[executor] kind = "slurm"``), submitted through submitit.

Each launch is one job on a node: the job runs the same build -> serve -> measure -> teardown
pipeline there (``run_on_node``: perfbisect importable on the node, the experiment, its
repository and perfbisect's cache on a filesystem the node shares) and hands back the
measurement. submitit reads job states with ``sacct``, which needs Slurm accounting; so this
waits on its own terms: the job's result file, else ``squeue``/``scontrol``, with a deadline.
A job that ends without a result (``scancel`` from outside, a node failure, preemption) is
submitted once more and is never a verdict on the configuration. Ctrl-C (``abort``) and the
end of the search cancel what is outstanding.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfbisect.config import Configuration
from perfbisect.errors import ExperimentError, StepFailed
from perfbisect.experiment import SUBMITIT_MISSING, ExecutorSettings, Experiment, load_experiment
from perfbisect.targets.base import Measurement

POLL_S = 1.0
SLACK_S = 300.0  # past the job's own time limit before perfbisect stops waiting
# Job states in which the job may still produce its result (squeue's long names).
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "RESIZING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
ATTEMPTS = 2  # a job that ends without a result is submitted once more
# Final states in which Slurm, not the job, ended it (scancel, preemption, a node lost, the time
# limit): what a job's own error then says is a consequence, not the cause.
INTERRUPTED_STATES = frozenset({"CANCELLED", "PREEMPTED", "NODE_FAIL", "TIMEOUT", "DEADLINE"})


def run_on_node(
    experiment_path: str, values: dict[str, str], context: str, log_dir: str
) -> tuple[str, Any]:
    """Run one launch where the job landed: ("ok", Measurement) or ("failed", (stage, why))."""
    from perfbisect.paths import cache_dir
    from perfbisect.targets.registry import make_target

    experiment = load_experiment(experiment_path)
    inner = replace(experiment, executor=ExecutorSettings())  # the pipeline itself, here
    target = make_target(inner, cache_dir())
    try:
        measured = target.launch(Configuration(tuple(values.items()), context), log_dir)
    except StepFailed as failure:
        return "failed", (failure.stage, failure.reason)
    finally:
        target.close()
    return "ok", measured


def _run(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


class SlurmTarget:
    """A Target whose launches are Slurm jobs."""

    def __init__(self, experiment: Experiment, cache_dir: Path) -> None:
        try:
            import submitit
        except ImportError:  # the experiment's check found it, but it does not import
            raise ExperimentError(
                f"{experiment.path}: key 'executor.kind': {SUBMITIT_MISSING}"
            ) from None

        self.experiment = experiment
        options = dict(experiment.executor.slurm)
        self.limit_min = int(options.get("time_limit_min", 60))
        self.folder = cache_dir / "slurm" / uuid.uuid4().hex[:10]
        self.executor = submitit.SlurmExecutor(folder=str(self.folder), max_num_timeout=0)
        params: dict[str, Any] = {
            "time": self.limit_min,
            "job_name": "perfbisect",
            "use_srun": False,
            "additional_parameters": dict(options.get("sbatch_args", {})),
        }
        if options.get("exclusive", True):  # a whole node (sbatch has no --exclusive=false)
            params["exclusive"] = True
        for key, name in (
            ("partition", "partition"),
            ("gpus_per_node", "gpus_per_node"),
            ("cpus_per_task", "cpus_per_task"),
            ("account", "account"),
            ("qos", "qos"),
        ):
            if key in options:
                params[name] = options[key]
        self.executor.update_parameters(**params)
        self._job: Any = None

    # ---- Target ---------------------------------------------------------------------------

    def launch(
        self, config: Configuration, log_dir: str, on_stage: Callable[[str], None] | None = None
    ) -> Measurement:
        stage = on_stage or (lambda _name: None)
        notes: list[str] = []
        for attempt in range(1, ATTEMPTS + 1):
            stage("slurm: submit")
            try:
                job = self.executor.submit(
                    run_on_node,
                    str(self.experiment.path),
                    config.as_dict(),
                    config.context,
                    log_dir,
                )
            except Exception as exc:  # sbatch refused it: a partition, account or qos typo
                why = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
                raise StepFailed("slurm", f"sbatch refused the job: {why}") from None
            self._job = job
            try:
                ended, node = self._wait(job, stage)
            except BaseException:
                self._cancel(job)
                raise
            finally:
                self._job = None
            if ended == "done":
                try:
                    return self._result(job, node, notes)
                except StepFailed as failed:
                    # A stage that failed because Slurm was ending the job (a scancel from
                    # outside landing in the checkout: its `git` got the SIGTERM, the job's
                    # Python still reported) is the job's failure, not the configuration's.
                    state = self._final_state(job.job_id)
                    if state not in INTERRUPTED_STATES:
                        raise  # the configuration failed a stage on the node: a verdict's
                    ended = f"{state} (its {failed.stage} failed as it went: {failed.reason})"
                except Exception as exc:
                    # The job's own Python died before the launch could report (a job cancelled
                    # while it started: its `git` got the SIGTERM): the job failed, not the
                    # configuration, like a job that ended without a result.
                    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
                    why = next(
                        (x for x in reversed(lines) if "Error" in x),
                        lines[-1] if lines else repr(exc),
                    ).strip()[:200]
                    # What Slurm says of the job comes first: a scancel from outside that
                    # lands while the job starts shows as its Python's error, but the job
                    # was CANCELLED.
                    state = self._final_state(job.job_id)
                    ended = (
                        f"{state} (its Python failed as it went: {why})"
                        if state in INTERRUPTED_STATES
                        else f"with an error in the job ({why})"
                    )
            notes.append(
                f"slurm job {job.job_id} ended {ended} on {node or 'no node'} without a result"
                + ("; submitted once more" if attempt < ATTEMPTS else "")
            )
        raise StepFailed("slurm", "; ".join(notes) + " (the jobs, not the configuration, failed)")

    def abort(self) -> None:
        job = self._job
        if job is not None:
            self._cancel(job)

    def close(self) -> None:
        self.abort()

    def describe(self, config: Configuration) -> dict[str, Any]:
        from perfbisect.paths import cache_dir
        from perfbisect.targets.registry import make_target

        inner = make_target(replace(self.experiment, executor=ExecutorSettings()), cache_dir())
        try:
            described = inner.describe(config)
        finally:
            inner.close()
        described["executor"] = {"kind": "slurm", **dict(self.experiment.executor.slurm)}
        return described

    # ---- internals ------------------------------------------------------------------------

    def _wait(self, job: Any, stage: Callable[[str], None]) -> tuple[str, str]:
        """("done", node) once the result file is there; (final state, node) once the job
        ended without one. Bounded by the job's own time limit plus slack."""
        deadline = time.monotonic() + self.limit_min * 60 + SLACK_S
        said = ""
        node = ""
        while time.monotonic() < deadline:
            if job.paths.result_pickle.exists():
                return "done", node or self._node(job.job_id)
            # ``-t all`` keeps a finished job listed (with its final state) for the
            # controller's MinJobAge, so a cancel from outside is seen as CANCELLED.
            listed = _run(["squeue", "-h", "-t", "all", "-j", str(job.job_id), "-o", "%T %N"])
            state, _, where = listed.partition(" ")
            node = where.strip() or node
            if state and state != said:
                said = state
                stage(f"slurm: job {job.job_id} {state.lower()}" + (f" on {node}" if node else ""))
            if not state or state not in LIVE_STATES:
                time.sleep(POLL_S)  # a finished job may be writing its result just now
                if job.paths.result_pickle.exists():
                    return "done", node or self._node(job.job_id)
                return state or self._final_state(job.job_id), node
            time.sleep(POLL_S)
        self._cancel(job)
        return f"past its time limit ({self.limit_min} min) and was cancelled", node

    @staticmethod
    def _job_field(job_id: str, key: str) -> str:
        """One field of ``scontrol show job`` (``BatchHost``, ``JobState``), "" if not shown."""
        for token in _run(["scontrol", "show", "job", str(job_id)]).split():
            if token.startswith(f"{key}="):
                return token.split("=", 1)[1]
        return ""

    def _node(self, job_id: str) -> str:
        return self._job_field(job_id, "BatchHost")

    def _final_state(self, job_id: str) -> str:
        # Purged from the controller already: it vanished.
        return self._job_field(job_id, "JobState") or "VANISHED"

    @staticmethod
    def _cancel(job: Any) -> None:
        try:
            job.cancel(check=False)
        except Exception:  # the job may be gone already
            subprocess.run(["scancel", str(job.job_id)], capture_output=True, timeout=60)

    def _result(self, job: Any, node: str, notes: list[str]) -> Measurement:
        kind, payload = job.result()
        if kind == "failed":
            stage_name, reason = payload
            raise StepFailed(stage_name, reason)
        measured: Measurement = payload
        measured.flags.extend([*notes, f"slurm job {job.job_id} on {node}"])
        measured.snapshot["slurm"] = {"job_id": str(job.job_id), "node": node}
        measured.snapshot["address"] = f"slurm://{node}"
        return measured


__all__ = ["SlurmTarget", "run_on_node"]
