"""Programs that perfbisect copies to a host and runs there with whatever Python that host has
(they import nothing from perfbisect, and are not imported by it: each is read as a file and
written to the host). In one place so that their constraint is visible: standard library only
(torch for the reference server, the SGLang environment for the verify timer and the client).

- ``reference_server.py``: the embedded tensor-parallel speculative server (the ``reference``
  target; the demo commits a copy as ``server.py``).
- ``hardware_probe.py``: NVML, driver, GPUs, NCCL, topology (``probe hardware``, every
  launch's environment snapshot).
- ``envchain_probe.py``: the chain shell -> Python parent -> spawn child -> C getenv of
  ``probe env-propagation``.
- ``verify_timer_boot.py``: imported at start-up in an SGLang environment (a ``.pth`` file),
  times the target-verify forward.
- ``sglang_workload.py``: the client that sends the workload and prints its summary.
"""

from pathlib import Path

REMOTE = Path(__file__).resolve().parent


def program(name: str) -> Path:
    """The file of one of these programs (to read and copy to a host)."""
    path = REMOTE / name
    if not path.is_file():
        raise FileNotFoundError(f"no such host-side program: {name}")
    return path
