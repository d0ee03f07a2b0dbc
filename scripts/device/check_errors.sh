#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): the bindings' failed argument checks raise, none crash.
# (Session 19: checks that format an integer died with SIGSEGV inside a static copy of libstdc++ that the
# machine's g++ (/opt/gcc) had linked into _C.so; the build now links the shared libstdc++.so.6:
# pagoda.platforms.csrc.SHARED_CXX_RUNTIME.)
#   1. what _C.so needs (libstdc++.so.6 must be among them) and whether it defines std::locale itself;
#   2. check_errors.py (each bad call in a child process) and the dense GEMV's bad-argument tests;
#   3. on a crash, a cuda-gdb backtrace of one (the image has no gdb).
# About 2 minutes. -> $OUT/summary.txt
#   bash scripts/device/check_errors.sh
source scripts/device/begin_cuda.sh check_errors
{
  so=$(ls /tmp/site/pagoda_platform_cuda/_C*.so)
  readelf -d "$so" | grep NEEDED | sed 's/.*Shared library: //' | tr '\n' ' '; echo
  echo "std::locale symbols defined in _C.so: $(nm -C --defined-only "$so" | grep -c 'std::locale::')"
  timeout 60 python3 scripts/device/check_errors.py 2>&1 | grep -E "^(raised|FAILED)"; crashed=${PIPESTATUS[0]}
  timeout 120 python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests/test_dense_gemv.py \
    -k bad_arguments 2>&1 | tail -1
  if [[ $crashed != 0 ]]; then
    printf 'import torch\nfrom pagoda_platform_cuda.build import load_extension\nw = torch.randn(32, 64, device="cuda")\n%s\n' \
      'load_extension().dense_gemv(torch.randn(5, 64, device="cuda", dtype=torch.bfloat16), w.bfloat16())' > "$R/crash.py"
    timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 "$R/crash.py" 2>&1 | grep -E "^#|SIG" | head -12
  fi
} 2>&1 | tee "$OUT/summary.txt"
pack_results
