"""Reading a PyTorch profiler trace (Chrome trace JSON, ``.json`` or ``.json.gz``) into its
complete events. HolisticTraceAnalysis (``pip install perfbisect[explain]``) parses it where it
is installed: its parser reads PyTorch's traces as its analyses do (the symbol table, the
kernel-launch correlation, the event filtering), and its ns rounding is turned off for this
call (it moves each event's start up and its end down to whole microseconds, which shortens a
3 us kernel by up to a third). Without it, the trace's JSON is read directly; the two readers
give the same summaries (tests/test_explain_mechanisms.py checks that on a real H200 trace).
What neither does is the per-verify windowing, which is perfbisect's (trace.py): HTA's own
breakdowns and its trace diff work on whole traces, warm-up and draft stages included."""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HTA = "HolisticTraceAnalysis"
JSON_READER = "perfbisect's JSON reader"


@dataclass(frozen=True)
class Event:
    name: str
    cat: str
    tid: Any
    ts: float
    dur: float
    correlation: Any

    @property
    def end(self) -> float:
        return self.ts + self.dur


def hta_available() -> bool:
    return importlib.util.find_spec("hta") is not None


def read_events(path: Path, use_hta: bool | None = None) -> tuple[list[Event], str]:
    """The trace's complete (``ph: X``) events and which reader read them."""
    if use_hta is None:
        use_hta = hta_available()
    reader = JSON_READER
    if use_hta:
        try:
            return _hta_events(path), HTA
        except Exception as exc:  # an HTA or pandas version not tried here: read it ourselves
            reader = f"{JSON_READER} (HolisticTraceAnalysis failed: {type(exc).__name__}: {exc})"
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return _json_events(json.loads(raw)), reader


def _json_events(data: Mapping[str, Any]) -> list[Event]:
    out = []
    for raw in data.get("traceEvents", []):
        if raw.get("ph") != "X" or "dur" not in raw:
            continue
        args = raw.get("args") or {}
        out.append(
            Event(
                str(raw.get("name", "")),
                str(raw.get("cat", "")),
                raw.get("tid"),
                float(raw["ts"]),
                float(raw["dur"]),
                args.get("correlation"),
            )
        )
    return out


def _hta_events(path: Path) -> list[Event]:
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.env_options import HTA_DISABLE_NS_ROUNDING_ENV
    from hta.configs.parser_config import ParserConfig

    logging.getLogger("hta").setLevel(logging.ERROR)  # it logs every parse as a warning
    before = os.environ.get(HTA_DISABLE_NS_ROUNDING_ENV)
    os.environ[HTA_DISABLE_NS_ROUNDING_ENV] = "1"
    try:
        with warnings.catch_warnings():  # pandas' deprecations of HTA's inplace= calls
            warnings.simplefilter("ignore")
            _, df, symbols = parse_trace_dataframe(str(path), ParserConfig())
    finally:
        if before is None:
            os.environ.pop(HTA_DISABLE_NS_ROUNDING_ENV, None)
        else:
            os.environ[HTA_DISABLE_NS_ROUNDING_ENV] = before
    if df.empty:
        return []
    names = symbols.get_sym_table()
    has_correlation = "correlation" in df.columns
    out = []
    for row in df.itertuples(index=False):
        correlation = int(row.correlation) if has_correlation else -1
        out.append(
            Event(
                names[int(row.name)],
                names[int(row.cat)],
                row.tid,
                float(row.ts),
                float(row.dur),
                None if correlation < 0 else correlation,
            )
        )
    return out
