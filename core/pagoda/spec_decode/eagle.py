"""The ``eagle`` proposer: an EAGLE-1/EAGLE-2 head over the target's hidden states.

``--speculative-config '{"method": "eagle", "model": "/path/to/head", "num_speculative_tokens": 4}'``

The head (:mod:`pagoda.spec_decode.eagle_head`) is loaded from its published checkpoint and runs
in the target's dtype on the target's device, with the target's embedding and LM head. The
engine hands the proposer the target's final hidden states of the positions computed since the
request last proposed (:mod:`pagoda.spec_decode.hidden`). Each step, per request:

1. catch up: the head's cache is cut back to the positions before the new rows (which drops the
   drafted positions of the previous round and anything recomputed), then one forward over the new
   rows, pairing the target's hidden state at ``p`` with the token at ``p + 1``: the prompt the
   first time, afterwards the accepted drafts and the target's token (``1 + accepted`` rows);
2. draft: the head's output at the last position, through the target's LM head, gives the first
   draft (argmax); each further draft feeds the head its own predicted hidden state and the draft
   before it, one row per request and step (EAGLE's chain; no tree);
3. the drafted positions' keys and values are dropped from the head's cache again: the target's
   true hidden states replace them in the next round's catch-up.

Drafts are the head's argmax (``q`` one-hot), so verification is exact for greedy and sampled
requests alike.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer, ProposerContext
from pagoda.layers.argmax import argmax
from pagoda.spec_decode.eagle_head import EagleHead, HeadCache, check_head_fits_target, load_head_checkpoint
from pagoda.spec_decode.vocab import load_vocab_weights

logger = logging.getLogger("pagoda")

# Targets whose embedding is a plain lookup (``model.embed_tokens``) and whose LM head reads the
# final norm's output: the Llama family that EAGLE heads are published for.
SUPPORTED_TARGETS = ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
                     "Qwen3ForCausalLM", "Qwen3MoeForCausalLM")


@dataclass
class _State:
    cache: HeadCache = field(default_factory=HeadCache)
    last_output: torch.Tensor | None = None  # [hidden]: the head's output at ``last_position``
    last_position: int = -1  # the last position the head holds the target's hidden state for


class EagleProposer(Proposer):
    description = "EAGLE-1/2 head: one decoder layer over the target's hidden states, embedding and LM head"
    supports_tensor_parallel = True  # on rank 0, with a whole copy of the target's embedding and LM head
    needs_hidden_states = True

    def __init__(self, config) -> None:
        super().__init__(config)
        if not config.model:
            raise ConfigError('the eagle proposer needs "model": the folder of an EAGLE head trained for the target, '
                              'e.g. {"method": "eagle", "model": "/models/EAGLE-LLaMA3-Instruct-8B", '
                              '"num_speculative_tokens": 4}')
        self.head: EagleHead | None = None
        self._embed = None
        self._logits = None
        self._target_dtype = torch.float32
        self._states: dict[str, _State] = {}

    # -- set-up ------------------------------------------------------------------------------
    def attach(self, context: ProposerContext) -> None:
        target = context.model
        architecture = (getattr(context.hf_config, "architectures", None) or ["?"])[0]
        embed = getattr(getattr(target, "model", None), "embed_tokens", None)
        if architecture not in SUPPORTED_TARGETS or embed is None:
            raise ConfigError(f"the eagle proposer runs EAGLE heads of Llama-family targets "
                              f"({', '.join(SUPPORTED_TARGETS)}); {architecture} is not one: use the \"draft\" or "
                              "\"ngram\" method with this model")
        ckpt = load_head_checkpoint(self.config.model)
        check_head_fits_target(ckpt, context.hf_config)
        device = context.platform.device()
        margin = self.config.num_speculative_tokens + 1
        self.head = EagleHead(ckpt, context.dtype, device, context.max_model_len + margin)
        compute_logits = target.compute_logits
        if context.engine_config.tensor_parallel_size > 1:  # the target's are split over the ranks
            vocab = load_vocab_weights(context, "the eagle proposer")
            embed, compute_logits = vocab.embed, vocab.compute_logits
        self.bind(self.head, embed, compute_logits, context.dtype)
        logger.info("EAGLE head %s: %d layer(s), %.1f M parameters", ckpt.path, len(self.head.layers),
                    sum(p.numel() for p in self.head.parameters()) / 1e6)

    def bind(self, head: EagleHead, embed, compute_logits, target_dtype: torch.dtype) -> None:
        """Use ``head`` with the target's embedding and LM head (``compute_logits``: hidden states in
        ``target_dtype`` -> logits); :meth:`attach` does this, tests call it directly."""
        self.head, self._embed, self._logits, self._target_dtype = head, embed, compute_logits, target_dtype

    # -- each step ---------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        if self.head is None:
            raise RuntimeError("EagleProposer.attach() was not called (the engine calls it at start)")
        budgets = [min(k, inp.max_drafts or k) for inp in inputs]
        outputs = self._catch_up(inputs)  # request index -> the head's output at its last verified position
        drafts: list[list[int]] = [[] for _ in inputs]
        active = [i for i in outputs if budgets[i] > 0]
        hidden = torch.stack([outputs[i] for i in active]) if active else None  # [B, H]
        step = 0
        while active:
            tokens = argmax(self._logits(hidden.to(self._target_dtype)))  # [B]
            for i, token in zip(active, tokens.tolist()):
                drafts[i].append(token)
            step += 1
            keep = [j for j, i in enumerate(active) if budgets[i] > step]
            if not keep:
                break
            active = [active[j] for j in keep]
            rows = torch.tensor(keep, device=hidden.device)
            positions = [self._states[inputs[i].request_id].last_position + step for i in active]
            spans = [(self._states[inputs[i].request_id].cache, 1) for i in active]
            hidden = self.head(self._embed(tokens[rows]), hidden[rows], positions, spans)
        for inp in inputs:  # drafted positions out of the head's cache: the target's states replace them
            state = self._states.get(inp.request_id)
            if state is not None:
                state.cache.truncate_from_position(state.last_position + 1)
        return Proposal(drafts)

    def release(self, request_id: str) -> None:
        self._states.pop(request_id, None)

    # -- helpers -----------------------------------------------------------------------------
    def _catch_up(self, inputs: list[ProposalInput]) -> dict[int, torch.Tensor]:
        """Feed each request's new target hidden states; the head's output at its last position per
        request that has one (requests with no usable state are left out: no drafts this step)."""
        ready: dict[int, torch.Tensor] = {}
        rows, tokens, positions, spans, owners = [], [], [], [], []
        for i, inp in enumerate(inputs):
            state = self._states.setdefault(inp.request_id, _State())
            end = len(inp.token_ids) - 1  # positions < end have the target's hidden states
            n = 0 if inp.hidden is None else int(inp.hidden.shape[0])
            if n == 0:
                if state.last_output is not None and state.last_position == end - 1:  # nothing new since last time
                    ready[i] = state.last_output
                continue
            start = end - n
            state.cache.truncate_from_position(start)
            rows.append(inp.hidden)
            tokens.extend(inp.token_ids[start + 1 : end + 1])
            positions.extend(range(start, end))
            spans.append((state.cache, n))
            owners.append(i)
        if not owners:
            return ready
        device = rows[0].device
        hidden = rows[0] if len(rows) == 1 else torch.cat(rows)
        token_ids = torch.tensor(tokens, dtype=torch.long, device=device)
        out = self.head(self._embed(token_ids), hidden, positions, spans)
        last = 0
        for i, (_, n) in zip(owners, spans):
            last += n
            state = self._states[inputs[i].request_id]
            state.last_output, state.last_position = out[last - 1], len(inputs[i].token_ids) - 2
            ready[i] = state.last_output
        return ready
