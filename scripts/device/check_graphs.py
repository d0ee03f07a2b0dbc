"""On the GPU machine: check every decode-graph replay against the eager forward on the same inputs.

Usage: python3 scripts/device/check_graphs.py NUM_PROMPTS  (Llama-3.1-8B dummy weights, triton)
Prints REPLAY FAILED / MISMATCH lines, then "OK {graph steps, eager steps} tokens".
"""
import sys, torch
from pagoda import LLM, SamplingParams
from pagoda.engine import model_runner as mr
from pagoda.interfaces.model import ForwardContext

orig = mr.ModelRunner._forward
count = {"graph": 0, "eager": 0}

def checked(self, inputs):
    if inputs.graph_size is not None:
        size = inputs.graph_size
        torch.cuda.synchronize()
        try:
            hidden = self.graphs.replay(size).clone()
            torch.cuda.synchronize()
        except Exception as e:
            print("REPLAY FAILED", size, e); sys.exit(1)
        meta = self.attention.prepare(inputs.metadata)  # the same (padded) inputs, run eagerly
        ref = self.model(inputs.input_ids, inputs.positions, ForwardContext(meta, self.kv_caches))
        torch.cuda.synchronize()
        err = (hidden.float() - ref.float()).abs().max().item()
        count["graph"] += 1
        if err > 0.5 or hidden.shape != ref.shape:
            print("MISMATCH", size, hidden.shape, ref.shape, err, flush=True)
        return hidden
    count["eager"] += 1
    out = orig(self, inputs)
    torch.cuda.synchronize()
    return out

mr.ModelRunner._forward = checked
llm = LLM(model="benchmarks/configs/llama-3.1-8b", load_format="dummy", attention_backend="triton",
          max_model_len=2048, skip_tokenizer_init=True)
g = torch.Generator().manual_seed(0)
prompts = torch.randint(0, 128000, (int(sys.argv[1]), 256), generator=g).tolist()
out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True), use_tqdm=False)
print("OK", count, sum(len(o.outputs[0].token_ids) for o in out))
