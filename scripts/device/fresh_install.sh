# Sourced by device scripts, from the repo root with $OUT set: a fresh build of pagoda and the named
# plugins into /tmp/site (log: $OUT/install.log, at most 200 s), then PYTHONPATH and PATH point there;
# exits with the log's tail if the build fails.
#   source scripts/device/fresh_install.sh plugins/platform_cuda plugins/quant_awq
rm -rf plugins/*/build plugins/*/*.egg-info
timeout 200 bash -c "source scripts/device/install_wheels.sh $*" > "$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
