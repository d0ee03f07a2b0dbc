#!/usr/bin/env bash
# Here, before a device run while others edit the working tree: put the last commit (HEAD) in .snap/
# (ignored), name ".snap" in `carry`, and start the device command with `cd .snap && ln -s ../.whl .whl &&`,
# so the GPU runs what was committed, not half-made edits.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.snap/' .git/info/exclude 2>/dev/null || echo '/.snap/' >> .git/info/exclude
rm -rf .snap && mkdir .snap && git archive HEAD | tar -x -C .snap
echo ".snap: $(git rev-parse --short HEAD)" | tee .snap/SNAPSHOT
