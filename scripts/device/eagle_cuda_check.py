"""EAGLE proposer on a CUDA device, without the engine: the head (float64 and bfloat16) and the
draft chain against the plain-torch reference of tests/engine/eagle_heads.py, tensors on the GPU.

    PYTHONPATH=core:tests/engine python3 scripts/device/eagle_cuda_check.py
"""

from __future__ import annotations

import tempfile

import torch

from eagle_heads import random_head_weights, reference_head, save_head
from pagoda.interfaces.proposer import ProposalInput
from pagoda.spec_decode.config import SpeculativeConfig
from pagoda.spec_decode.eagle import EagleProposer
from pagoda.spec_decode.eagle_head import EagleHead, load_head_checkpoint
from pagoda.spec_decode.hidden import HiddenStates

VOCAB, H = 384, 64


def main() -> None:
    dev = torch.device("cuda")
    weights = {k: v.double() for k, v in random_head_weights(seed=2).items()}
    ckpt = load_head_checkpoint(save_head(tempfile.mkdtemp(), weights))
    g = torch.Generator().manual_seed(3)
    embed_w = torch.randn(VOCAB, H, generator=g, dtype=torch.float64)
    lm_w = torch.randn(VOCAB, H, generator=g, dtype=torch.float64)
    states = torch.randn(32, H, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, VOCAB, (12,), generator=g).tolist()
    for dtype in (torch.float64, torch.bfloat16):
        head = EagleHead(ckpt, dtype, dev, 64)
        proposer = EagleProposer(SpeculativeConfig(method="eagle", num_speculative_tokens=3, model="unused"))
        e, l = embed_w.to(dev, dtype), lm_w.to(dev, dtype)
        proposer.bind(head, lambda ids: e[ids], lambda h: (h @ l.T).float(), dtype)
        drafts = proposer.propose([ProposalInput("r", tokens, states[:11].to(dev, dtype))], 3).token_ids[0]
        ref_out = reference_head(weights, embed_w[torch.tensor(tokens[1:])][None], states[:11][None])[0, -1]
        first = int((ref_out @ lm_w.T).argmax())
        print(dtype, "drafts", drafts, "reference first draft", first,
              "cache on", proposer._states["r"].cache.keys[0].device)
        if dtype == torch.float64:
            assert drafts[0] == first
    store = HiddenStates()

    class Req:
        def __init__(self, rid, computed):
            self.request_id, self.num_computed_tokens = rid, computed

    class Out:
        requests = [Req("a", 0), Req("b", 5)]
        num_tokens = [3, 2]

    hidden = torch.arange(10 * 4, dtype=torch.float32, device=dev).view(10, 4)
    store.record(Out(), hidden, [0, 5, 10])  # padded layout: index_select on the device
    a, b = store.take("a", 3), store.take("b", 7)
    assert a.device.type == "cuda" and torch.equal(a, hidden[0:3]) and torch.equal(b, hidden[5:7])
    print("hidden states store on", a.device, "ok")


if __name__ == "__main__":
    main()
