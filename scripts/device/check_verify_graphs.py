"""On the GPU machine: check verify-graph replays (speculative decoding) against the eager forward
of the same padded inputs, on Llama-3.1-8B dummy weights with the n-gram proposer.

Usage: python3 scripts/device/check_verify_graphs.py [NUM_PROMPTS]  (after install_wheels.sh)
Prints REPLAY FAILED / MISMATCH lines, then "OK {verify replays, other steps} tokens accepted".
"""
import sys

import torch

from pagoda import LLM, SamplingParams
from pagoda.engine import model_runner as mr
from pagoda.interfaces.model import ForwardContext

orig = mr.ModelRunner._forward
count = {"verify": 0, "other": 0}


def checked(self, inputs):
    if inputs.graph_size is not None and inputs.graphs is not None:  # a verify graph
        torch.cuda.synchronize()
        try:
            hidden = inputs.graphs.replay(inputs.graph_size).clone()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            print("REPLAY FAILED", inputs.graph_size, e)
            sys.exit(1)
        meta = self.attention.prepare(inputs.metadata)
        ref = self.model(inputs.input_ids, inputs.positions, ForwardContext(meta, self.kv_caches))
        torch.cuda.synchronize()
        real = inputs.metadata.slot_mapping >= 0  # the requests' tokens (padding writes no KV)
        err = (hidden[real].float() - ref[real].float()).abs().max().item()
        count["verify"] += 1
        if err > 0.5 or hidden.shape != ref.shape:
            print("MISMATCH", inputs.graph_size, hidden.shape, ref.shape, err, flush=True)
        return hidden
    count["other"] += 1
    return orig(self, inputs)


mr.ModelRunner._forward = checked
llm = LLM(model="benchmarks/configs/llama-3.1-8b", load_format="dummy", attention_backend="triton",
          max_model_len=2048, skip_tokenizer_init=True, max_num_seqs=16,
          speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "backoff": False})
g = torch.Generator().manual_seed(0)
base = torch.randint(0, 128000, (int(sys.argv[1]) if len(sys.argv) > 1 else 12, 40), generator=g).tolist()
prompts = [p * 4 for p in base]  # repeated text: the proposer drafts
out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=48, ignore_eos=True), use_tqdm=False)
s = llm.engine.stats
print("OK", count, sum(len(o.outputs[0].token_ids) for o in out), "accepted", s.spec_num_accepted_tokens,
      "of", s.spec_num_draft_tokens)
