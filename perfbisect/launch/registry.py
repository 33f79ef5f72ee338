"""Launchers by method: each ``Method`` maps to the class that starts a server its way. The
one module that knows every launcher, so ``launch/base.py`` stays free of them (no import
circle)."""

from __future__ import annotations

from collections.abc import Callable

from perfbisect.launch.base import Launcher, LaunchOptions, Method
from perfbisect.launch.direct import DirectLauncher
from perfbisect.launch.sitecustomize import SitecustomizeLauncher
from perfbisect.launch.ssh import SshLauncher
from perfbisect.launch.tmux import TmuxLauncher

LAUNCHERS: dict[Method, Callable[[LaunchOptions], Launcher]] = {
    Method.DIRECT: lambda options: DirectLauncher(),
    Method.TMUX: lambda options: TmuxLauncher(),
    Method.SSH: SshLauncher,
    Method.SITECUSTOMIZE: SitecustomizeLauncher,
}


def make_launcher(method: Method | str, options: LaunchOptions | None = None) -> Launcher:
    method = method if isinstance(method, Method) else Method.parse(method)
    return LAUNCHERS[method](options or LaunchOptions())
