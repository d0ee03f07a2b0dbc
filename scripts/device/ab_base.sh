# Sourced by device scripts after fresh_install.sh: the CUDA platform plugin built again from this tree
# with the files under folder $1 laid over it (the same relative paths; carry that folder, e.g. `.ab`,
# ignored in .git/info/exclude, holding the baseline's versions of the changed csrc files) into
# /tmp/site_base. `PYTHONPATH=$BASE_PYTHONPATH CMD...` then runs CMD with that build in front of the new
# one: an A/B of a kernel change on one machine, in one call. About 40 s (log: $OUT/install_base.log).
#   source scripts/device/ab_base.sh .ab
rm -rf /tmp/ab_tree /tmp/site_base && mkdir -p /tmp/ab_tree && tar cf - --exclude=./.whl --exclude=./.git . \
  | tar xf - -C /tmp/ab_tree && cp -r "$1"/. /tmp/ab_tree/
(cd /tmp/ab_tree && rm -rf plugins/*/build plugins/*/*.egg-info && timeout 200 python3 -m pip install -q --no-index \
  --no-deps --no-compile --no-cache-dir --no-build-isolation --target /tmp/site_base ./plugins/platform_cuda) \
  > "$OUT/install_base.log" 2>&1 || { tail -30 "$OUT/install_base.log"; exit 1; }
BASE_PYTHONPATH="/tmp/site_base:$PYTHONPATH"
