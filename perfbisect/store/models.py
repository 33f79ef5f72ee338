"""SQLAlchemy 2.0 models of the history database.

Every launch keeps its raw samples, timings, log location and an environment snapshot, so any
number reported can be traced to what produced it. Schema changes go through alembic
migrations (``perfbisect/store/migrations``); bump ``SCHEMA_REVISION`` with each one.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Host(Base):
    __tablename__ = "hosts"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    address: Mapped[str] = mapped_column(String(255))


class EnvSnapshot(Base):
    __tablename__ = "env_snapshots"
    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    taken_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    digest: Mapped[str] = mapped_column(String(64), index=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    host: Mapped[Host] = relationship()


class ConfigurationRow(Base):
    __tablename__ = "configurations"
    fingerprint: Mapped[str] = mapped_column(String(40), primary_key=True)
    axes: Mapped[dict[str, Any]] = mapped_column(JSON)
    context: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class SessionRow(Base):
    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str | None] = mapped_column(String(255), unique=True, nullable=True)
    status: Mapped[str] = mapped_column(String(32), index=True)
    outcome: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    good: Mapped[dict[str, Any]] = mapped_column(JSON)
    bad: Mapped[dict[str, Any]] = mapped_column(JSON)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    path: Mapped[list[Any]] = mapped_column(JSON)
    experiment_path: Mapped[str] = mapped_column(Text)
    experiment_text: Mapped[str] = mapped_column(Text)
    owner_host: Mapped[str] = mapped_column(String(255))
    owner_pid: Mapped[int] = mapped_column(Integer)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class Build(Base):
    __tablename__ = "builds"
    id: Mapped[int] = mapped_column(primary_key=True)
    session_id: Mapped[int | None] = mapped_column(ForeignKey("sessions.id"), nullable=True)
    fingerprint: Mapped[str] = mapped_column(ForeignKey("configurations.fingerprint"), index=True)
    status: Mapped[str] = mapped_column(String(16))
    cached: Mapped[bool] = mapped_column(default=False)
    duration_s: Mapped[float] = mapped_column(Float)
    log_tail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Launch(Base):
    __tablename__ = "launches"
    id: Mapped[int] = mapped_column(primary_key=True)
    session_id: Mapped[int | None] = mapped_column(ForeignKey("sessions.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)  # order within the session, for replay on resume
    fingerprint: Mapped[str] = mapped_column(ForeignKey("configurations.fingerprint"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    purpose: Mapped[str] = mapped_column(String(16))
    metric: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))  # ok | failed
    stage: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_samples: Mapped[int] = mapped_column(Integer, default=0)
    flags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    timings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("env_snapshots.id"), nullable=True)
    snapshot: Mapped[EnvSnapshot | None] = relationship()
    configuration: Mapped[ConfigurationRow] = relationship()


class Sample(Base):
    __tablename__ = "samples"
    id: Mapped[int] = mapped_column(primary_key=True)
    launch_id: Mapped[int] = mapped_column(
        ForeignKey("launches.id", ondelete="CASCADE"), index=True
    )
    idx: Mapped[int] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Float)


class Step(Base):
    """A verdict the engine reached about one configuration in one session."""

    __tablename__ = "steps"
    id: Mapped[int] = mapped_column(primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    fingerprint: Mapped[str] = mapped_column(ForeignKey("configurations.fingerprint"))
    position: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(String(16))
    median: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_lo: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_hi: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_launches: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ProbeRun(Base):
    """One run of a probe (env-propagation, hardware): its whole result, with the host's
    snapshot at that moment."""

    __tablename__ = "probe_runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("env_snapshots.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)


class WatchSeries(Base):
    """A watched branch's measurements on one class of host, for one experiment file
    (``perfbisect watch``): its points are launches of kind ``watch``."""

    __tablename__ = "watch_series"
    __table_args__ = (UniqueConstraint("branch", "host_class", "experiment_sha256"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    branch: Mapped[str] = mapped_column(String(255))
    host_class: Mapped[str] = mapped_column(String(255))
    experiment_sha256: Mapped[str] = mapped_column(String(64))
    experiment_path: Mapped[str] = mapped_column(Text)
    metric: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)


class WatchLaunch(Base):
    """One launch of a series' commit (a commit has a few)."""

    __tablename__ = "watch_launches"
    id: Mapped[int] = mapped_column(primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("watch_series.id"), index=True)
    launch_id: Mapped[int] = mapped_column(ForeignKey("launches.id"))
    commit: Mapped[str] = mapped_column(String(64))
    ordinal: Mapped[int] = mapped_column(Integer)  # place on the branch's first-parent chain


class ChangePointRow(Base):
    """A change point found in a series, kept by (series, first commit after it) so that its
    id stays the same across analyses; ``status`` says whether the latest analysis still
    finds it."""

    __tablename__ = "change_points"
    __table_args__ = (UniqueConstraint("series_id", "commit_after"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("watch_series.id"), index=True)
    commit_before: Mapped[str] = mapped_column(String(64))
    commit_after: Mapped[str] = mapped_column(String(64))
    ordinal_after: Mapped[int] = mapped_column(Integer)
    detected_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    status: Mapped[str] = mapped_column(String(16))  # found | withdrawn
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)
