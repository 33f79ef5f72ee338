"""Experiment files and configuration specs: every error names the file, the key and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.bisect.space import AxisValues, staircase_path
from perfbisect.config import Configuration, parse_spec
from perfbisect.errors import ExperimentError, UsageError
from perfbisect.experiment import load_experiment

GOOD = """\
[target]
kind = "command"
measure = "python3 bench.py --port {port}"
serve = "python3 server.py --port {port}"
ready = "http://127.0.0.1:{port}/health"
timeout_s = 30

[metric]
name = "verify_ms"
pattern = 'verify_ms=([0-9.]+)'

[axes.custom.flag]
values = ["a", "b", "c"]
ordered = true

[env]
NCCL_PROTO = "LL"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "perfbisect.toml"
    path.write_text(text)
    return path


def test_valid_experiment_loads(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, GOOD))
    assert exp.metric.name == "verify_ms"
    assert exp.custom_axes[0].values == ("a", "b", "c")
    assert exp.env == {"NCCL_PROTO": "LL"}
    assert exp.axis_names() == ["flag", "launch"]
    assert exp.timeout_s == 30


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("timeout_s = 30", "timeout_s = 30\nmeasur = 'x'"),
            r"perfbisect.toml:7: key 'target.measur': unknown key",
        ),
        (
            ("timeout_s = 30", 'timeout_s = "30"'),
            r"perfbisect.toml:6: key 'target.timeout_s': must be int or float, not str",
        ),
        (
            ('measure = "python3 bench.py --port {port}"\n', ""),
            r"perfbisect.toml:1: key 'target': missing required key 'measure'",
        ),
        (
            ("pattern = 'verify_ms=([0-9.]+)'", "pattern = 'verify_ms='"),
            r"perfbisect.toml:10: key 'metric.pattern': needs one capture group",
        ),
        (
            ("pattern = 'verify_ms=([0-9.]+)'", "pattern = '(['"),
            r"key 'metric.pattern': invalid regular expression",
        ),
        (
            ('kind = "command"', 'kind = "nope"'),
            r"perfbisect.toml:2: key 'target.kind': unknown target kind 'nope'",
        ),
        (
            ("ordered = true", "ordered = 1"),
            r"perfbisect.toml:14: key 'axes.custom.flag.ordered': must be bool, not int",
        ),
        (
            ('values = ["a", "b", "c"]', 'values = ["a", "a"]'),
            r"key 'axes.custom.flag.values': lists a value twice",
        ),
        (("[env]", "[environment]"), r"perfbisect.toml:16: key 'environment': unknown table"),
        (
            ('NCCL_PROTO = "LL"', "NCCL_PROTO = true"),
            r"key 'env.NCCL_PROTO': must be a string or number",
        ),
        (
            ("[axes.custom.flag]", "[axes.custom.commit]"),
            r"axis name 'commit' must be lower_snake_case",
        ),
    ],
)
def test_bad_experiment_is_a_clear_error(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    old, new = edit
    assert old in GOOD
    with pytest.raises(ExperimentError, match=message):
        load_experiment(write(tmp_path, GOOD.replace(old, new)))


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match="invalid TOML"):
        load_experiment(write(tmp_path, "[target\n"))
    with pytest.raises(ExperimentError, match="experiment file not found"):
        load_experiment(tmp_path / "missing.toml")


def test_missing_repo_directory(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match=r"key 'target.repo': directory .* does not exist"):
        load_experiment(
            write(tmp_path, GOOD.replace('kind = "command"', 'kind = "command"\nrepo = "nowhere"'))
        )


def test_parse_spec() -> None:
    assert parse_spec("v1.2") == {"commit": "v1.2"}
    assert parse_spec("commit=abc, flag=b") == {"commit": "abc", "flag": "b"}
    for bad in ("", "a,,b", "flag=", "=x", "a,commit=b"):
        with pytest.raises(UsageError):
            parse_spec(bad)


def test_fingerprint_depends_on_values_and_context() -> None:
    a = Configuration.of({"commit": "1", "flag": "a"}, "ctx")
    assert a.fingerprint == Configuration.of({"flag": "a", "commit": "1"}, "ctx").fingerprint
    assert a.fingerprint != a.with_value("flag", "b").fingerprint
    assert a.fingerprint != Configuration.of({"commit": "1", "flag": "a"}, "other").fingerprint


def test_staircase_path_changes_one_axis_at_a_time() -> None:
    good = Configuration.of({"commit": "c0", "flag": "a"})
    bad = Configuration.of({"commit": "c2", "flag": "c"})
    flag = AxisValues("flag", ("a", "b", "c"), ordered=True)
    path = staircase_path(good, bad, {"commit": ["c0", "c1", "c2"], "flag": flag.segment("a", "c")})
    assert [p.label() for p in path] == [
        "c0,flag=a",
        "c1,flag=a",
        "c2,flag=a",
        "c2,flag=b",
        "c2,flag=c",
    ]
    assert AxisValues("x", ("a", "b", "c"), ordered=True).segment("c", "a") == ["c", "b", "a"]
    assert AxisValues("x", ("a", "b", "c"), ordered=False).segment("a", "c") == ["a", "c"]
