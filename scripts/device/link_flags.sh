#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): how the extension is linked. A failed check that formats an
# integer crashes in a std::ostream::_M_insert<long> and codecvt code inside _C.so itself, which
# suggests a static libstdc++ in the extension: Python's build flags, the environment, the .so's needs.
#   bash scripts/device/link_flags.sh
OUT="${OUT:-$PWD/link_flags_out}"; mkdir -p "$OUT"
{
  python3 -c "import sys, sysconfig; print(sys.version); [print(k, '=', sysconfig.get_config_var(k)) for k in \
('CC', 'CXX', 'LDSHARED', 'LDCXXSHARED', 'LDFLAGS', 'CFLAGS', 'CONFIGURE_LDFLAGS', 'PY_LDFLAGS')]"
  env | grep -iE "flags|^cc=|^cxx=" ; echo "--- install"
  rm -rf plugins/*/build plugins/*/*.egg-info
  timeout 200 python3 -m pip install -v --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl > /dev/null 2>&1
  timeout 200 python3 -m pip install -v --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation \
    --target /tmp/site . plugins/platform_cuda > "$OUT/install_verbose.log" 2>&1; echo "install exit $?"
  grep -E "^\s*(g\+\+|x86_64-linux-gnu-g\+\+|c\+\+|clang\+\+|gcc)\b.*-shared" "$OUT/install_verbose.log" | tail -1 | cut -c1-3000
  so=$(ls /tmp/site/pagoda_platform_cuda/_C*.so); echo "so: $so"
  readelf -d "$so" | grep NEEDED
  echo "defined codecvt/locale symbols: $(nm -C --defined-only "$so" | grep -cE 'std::codecvt|std::locale::')"
  nm -C --defined-only "$so" | grep -E "_M_insert<long>|locale::classic|ios_base::Init" | head -5
} 2>&1 | tee "$OUT/summary.txt"
