#!/bin/bash
# Two SGLang "checkouts" from released sdists (PyPI; the git repository is not reachable from
# the development machine), then `bisect start --dry-run` on each: the output is dry_run.txt.
set -euo pipefail
pip download -q --no-deps --no-binary :all: sglang==0.4.6.post5 sglang==0.5.9 -d .
git init -q -b main ck && (cd ck && for v in 0.4.6.post5 0.5.9; do
  rm -rf python && mkdir python && tar -xzf ../sglang-$v.tar.gz --strip-components=1 -C python
  git add -A && git -c user.name=T -c user.email=t@e commit -qm "sglang $v (sdist as python/)"
done)
git init -q -b main ck2 && (cd ck2 && tar -xzf ../sglang-0.5.9.tar.gz && mv sglang-0.5.9 python &&
  git add -A && git -c user.name=T -c user.email=t@e commit -qm "sglang 0.5.9" && git tag v0.5.9 &&
  echo x > README.md && git add -A && git -c user.name=T -c user.email=t@e commit -qm "local change")
sed 's/repo = "ck"/repo = "ck2"/' perfbisect.toml > perfbisect-059.toml
perfbisect bisect start --good "$(git -C ck rev-parse HEAD~1)" --bad "$(git -C ck rev-parse HEAD)" --dry-run
perfbisect bisect start -c perfbisect-059.toml --good "$(git -C ck2 rev-parse HEAD~1)" \
    --bad "$(git -C ck2 rev-parse HEAD)" --dry-run
