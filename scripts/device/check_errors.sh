#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): why a failed argument check of a csrc binding that formats an
# integer into its message crashes the process (SIGSEGV) while checks with text alone raise:
#   1. check_errors.py (each bad call in a child process);
#   2. which libstdc++ / compiler the extension and the process use;
#   3. a backtrace of one crashing call under cuda-gdb (the image has no gdb).
# About 3 minutes. -> $OUT/summary.txt
#   bash scripts/device/check_errors.sh
source scripts/device/begin_cuda.sh check_errors
{
  timeout 60 python3 scripts/device/check_errors.py 2>&1 | grep -E "^(raised|FAILED)"
  so=$(python3 -c "import pagoda_platform_cuda._C as m; print(m.__file__)" 2>&1)
  echo "extension: $so"; ldd "$so" 2>&1 | grep -E "stdc|gcc_s|c10.so|torch_python"
  strings -a "$so" | grep -m3 "GCC: ("; g++ --version | head -1; nvcc --version | tail -1
  python3 -c "import torch, pagoda_platform_cuda._C; print(torch.__version__, torch._C._GLIBCXX_USE_CXX11_ABI); \
print(''.join(sorted({l.split()[-1] + '\n' for l in open('/proc/self/maps') if 'libstdc' in l or 'libgcc_s' in l})))"
  cat > "$R/crash.py" <<'PY'
import torch
from pagoda_platform_cuda.build import load_extension
k = load_extension()
w = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
k.dense_gemv(torch.randn(5, 64, device="cuda", dtype=torch.bfloat16), w)
PY
  timeout 120 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args python3 "$R/crash.py" 2>&1 \
    | grep -vE "^\[(New|Thread|Detaching)" | grep -E "^#|signal|SIG|stdc|From .*libstdc" | head -40
} 2>&1 | tee "$OUT/summary.txt"
pack_results
