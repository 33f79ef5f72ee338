"""The real-source patches of docs/examples/sglang_gpu/real_source/prepare.py, made against a
commit of the upstream range that travels to the GPU machine (.gpu/p2's sglang-range.git.tar):
``3117415c9bcd``, where the v0.5.12 release branch forks from main (its sources are 0.5.12's
bar the release's version bumps). The SGLang 0.5.12 wheel prepare.py starts from does not
travel any more; the edits are the same, each asserted to find its text.

    python make_patches.py CLONE COMMIT OUT_DIR
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PREPARE = HERE.parent / "sglang_gpu" / "real_source" / "prepare.py"
WANTED = ("04-verify-out-of-graphs.patch", "05-verify-host-sync.patch")


def main(clone: Path, commit: str, out: Path) -> int:
    spec = importlib.util.spec_from_file_location("prepare", PREPARE)
    assert spec is not None and spec.loader is not None
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".work"
    subprocess.run(["git", "clone", "-q", str(clone), str(work)], check=True)
    subprocess.run(
        ["git", "-C", str(work), "-c", "advice.detachedHead=false", "checkout", "-q", commit],
        check=True,
    )
    for name, path, edits in prepare.PATCHES:
        if name not in WANTED:
            continue
        file = work / path
        text = file.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{name}: {path} has {text.count(old)} copies of its text")
            text = text.replace(old, new)
        file.write_text(text)
        diff = prepare.git(work, "diff")
        (out / name).write_text(diff)
        prepare.git(work, "checkout", "-q", "--", ".")
        prepare.git(work, "apply", "--check", str(out / name))
        print(f"{name}: applies to {commit[:12]}")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
