"""The ``draft`` proposer: a small model of the same tokenizer, run by Pagoda's own engine parts.

``--speculative-config '{"method": "draft", "model": "/path/to/small", "num_speculative_tokens": 4}'``

The draft model is built like the target (:func:`pagoda.runner.shard.build_model_shard`: same
platform, attention backend, dtype and block size), with its own paged KV cache
(:class:`~pagoda.kv_cache.manager.KVCacheManager`, no prefix caching) and its own
:class:`~pagoda.runner.model_runner.ModelRunner` (decode graphs where the target has them). It
keeps a *shadow* of each speculating request: the tokens the draft has seen and how many of them
have KV in its cache. Each step:

1. sync: the shadow's tokens are cut back to the longest prefix they share with the request's
   verified tokens (the drafts the target rejected go; their KV blocks are released) and the
   request's new tokens appended;
2. draft: a shadow one or two tokens behind (the target's token after the accepted drafts; two
   when all were accepted) drafts ``k`` tokens in ``k`` steps: the first computes its known
   tokens (two query slots per row when some row has two), each later one the previous step's
   argmax (:mod:`pagoda.spec_decode.draft_chain`: the round's inputs copied in at once, each
   step a graph replay that leaves its argmax on the device as the next step's input, one host
   read per round). A shadow further behind (a new one: its whole prompt) first gets one step
   of the draft's runner over its uncomputed tokens, which samples its first draft on the
   device; its other drafts follow in one-token steps.

Where the engine has just queued a verify step, the next round of each shadow it verifies is
queued right behind it, for whichever outcome the device finds
(:mod:`pagoda.spec_decode.draft_prelaunch`, :meth:`DraftProposer.prelaunch`); step 2 then only
reads its drafts.

The drafts are the draft model's argmax, deterministic given the context (``q`` one-hot), so
verification is exact for greedy and sampled requests alike. The cache holds as many tokens as
the target's plus one block per sequence; a shadow that does not fit is dropped (it is rebuilt
later) and its request runs without drafts meanwhile. On a GPU the draft's weights and cache come
out of the memory the target leaves: lower ``--gpu-memory-utilization`` to make room.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Callable

import torch

from pagoda.kv_cache.manager import KVCacheManager
from pagoda.runner.model_runner import ModelRunner, PendingStep
from pagoda.request import PLACEHOLDER, Request, RequestStatus
from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import DeviceDrafts, Proposal, ProposalInput, Proposer, ProposerContext, VerifyOutcome
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.sampling_params import SamplingParams
from pagoda.spec_decode import draft_prelaunch
from pagoda.spec_decode.draft_chain import ChainRow, DraftChain
from pagoda.spec_decode.draft_steps import MAX_QUERY, DraftSteps

logger = logging.getLogger("pagoda")
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
GREEDY = SamplingParams(temperature=0.0, max_tokens=None)
MAX_FED_TOKENS = MAX_QUERY  # a shadow this many tokens behind (or fewer) is caught up in its round's first step


@dataclasses.dataclass
class _Shadow:
    request: Request  # the draft's copy: token_ids, num_computed_tokens
    num_synced: int  # leading tokens known equal to the target request's verified tokens


@dataclasses.dataclass
class _Taken:
    """An input whose drafts a prelaunched round computes: its plan, the outcome its tokens show,
    its tokens from the plan's base on, and how many drafts it takes."""

    plan: "draft_prelaunch.PrelaunchedRow"
    accepted: int
    known: list[int]
    count: int


@dataclasses.dataclass
class _Launched:
    """A round's steps for some shadows, queued on the device; :meth:`read` waits for their drafts."""

    requests: list[Request]  # the shadows, in row order
    rows: list[ChainRow]
    wait: Callable[[], list[torch.Tensor]]  # -> [the chained steps' tokens [steps, rows]] on the host
    first: PendingStep | None  # seeded rows: the runner step that sampled their first drafts

    def read(self) -> dict[str, list[int]]:
        """Each shadow's drafts, appended to it (its KV computed up to the last draft, exclusive)."""
        firsts = self.first.result().sampled if self.first is not None else {}
        columns = self.wait()[0].T.tolist() if self.rows else []
        drafts = {}
        for req, row, column in zip(self.requests, self.rows, columns):
            drafted = column[: row.steps] if row.fed else [firsts[req.request_id], *column[: row.steps]]
            drafts[req.request_id] = drafted
            req.token_ids.extend(drafted)
            req.num_computed_tokens += row.computed
        return drafts


class DraftProposer(Proposer):
    description = "draft model: a small model of the same tokenizer proposes greedily (its own runner and KV cache)"
    supports_tensor_parallel = True  # the draft runs whole on rank 0's device, beside its shard of the target

    def __init__(self, config) -> None:
        super().__init__(config)
        if not config.model:
            raise ConfigError('the draft proposer needs "model": the folder of a small model with the target\'s '
                              'tokenizer, e.g. {"method": "draft", "model": "/models/Llama-3.2-1B", '
                              '"num_speculative_tokens": 4}')
        self.runner: ModelRunner | None = None
        self.chain: DraftChain | None = None
        self.kv_cache: KVCacheManager | None = None
        self.max_batch_tokens = 8192
        self._shadows: dict[str, _Shadow] = {}
        self._prelaunched: draft_prelaunch.Prelaunched | None = None  # a round queued behind the verify step
        self.max_model_len = 0

    # -- set-up ------------------------------------------------------------------------------
    def attach(self, context: ProposerContext) -> None:
        from pagoda.runner.graphs import use_graphs
        from pagoda.runner.shard import build_model_shard
        from pagoda.loader import load_hf_config, resolve_model

        source = resolve_model(self.config.model)
        hf_config = load_hf_config(source)
        _check_compatible(hf_config, context)
        engine = context.engine_config
        config = dataclasses.replace(
            engine, model=self.config.model, tokenizer=None, skip_tokenizer_init=True, speculative_config=None,
            tensor_parallel_size=1,
            dtype=DTYPE_NAMES.get(context.dtype, "auto"), max_model_len=context.max_model_len,
            quantization=self.config.options.get("quantization"), enable_prefix_caching=False,
            load_format=self.config.options.get("load_format", engine.load_format),
            kv_cache_memory=_cache_bytes(hf_config, context),
        )
        self.max_batch_tokens = max(engine.max_num_batched_tokens or 8192, engine.max_num_seqs)
        self.max_model_len = context.max_model_len
        try:
            shard = build_model_shard(config, context.platform, source, hf_config)
        except torch.OutOfMemoryError as exc:
            raise ConfigError(f"the draft model {self.config.model} and its KV cache do not fit next to the target: "
                              f"lower --gpu-memory-utilization (or --kv-cache-memory) to leave room ({exc})") from None
        self.kv_cache = KVCacheManager(shard.num_blocks, config.block_size, enable_prefix_caching=False)
        self.runner = ModelRunner(shard.model, shard.attention, context.platform, shard.kv_caches, config.block_size,
                                  config.seed)
        steps = DraftSteps(self.runner, context.max_model_len)  # the runner itself only catches prompts up (eager)
        if use_graphs(config, context.platform, shard.attention):
            steps.capture(engine.max_num_seqs)
        self.chain = DraftChain(steps)
        logger.info("Draft model %s: %d KV blocks", self.config.model, shard.num_blocks)

    # -- each step ---------------------------------------------------------------------------
    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        if self.runner is None:
            raise RuntimeError("DraftProposer.attach() was not called (the engine calls it at start)")
        budgets = {inp.request_id: min(k, k if inp.max_drafts is None else inp.max_drafts) for inp in inputs}
        prelaunched, taken = self._take_prelaunched(inputs, budgets)
        shadows = [self._sync(inp) for inp in inputs if inp.request_id not in taken]
        drafting = [s.request for s in shadows if budgets[s.request.request_id] > 0]
        behind = [req for req in drafting if req.num_tokens - req.num_computed_tokens > MAX_FED_TOKENS]
        fed = [req for req in drafting if req.num_tokens - req.num_computed_tokens <= MAX_FED_TOKENS]
        launched = [self._launch_fed(fed, budgets), self._launch_behind(behind, budgets)]  # both queued, then read
        drafts = {rid: [PLACEHOLDER] * t.count for rid, t in taken.items()}  # still on the device
        for chain in launched:
            drafts.update(chain.read())
        proposal = Proposal([drafts.get(inp.request_id, []) for inp in inputs])
        if taken:
            proposal.on_device = self._on_device(prelaunched, taken, inputs)
        return proposal

    def prelaunch(self, outcome: VerifyOutcome, k: int) -> None:
        """Queue the next round of the shadows that drafted what ``outcome`` verifies, for every
        outcome at once, behind the verify step (:mod:`pagoda.spec_decode.draft_prelaunch`)."""
        if self.runner is None:
            return
        plans, index = [], []
        for i, (rid, verified) in enumerate(zip(outcome.request_ids, outcome.drafts)):
            plan = self._plan(rid, verified, k, len(plans))
            if plan is not None:
                plans.append(plan)
                index.append(i)
        if plans:
            with self.runner.platform.inference_context():
                tokens, wait = draft_prelaunch.queue(self.chain, plans, outcome, index, k)
            self._prelaunched = draft_prelaunch.Prelaunched({outcome.request_ids[i]: p for i, p in zip(index, plans)},
                                                            tokens, wait)

    def release(self, request_id: str) -> None:
        shadow = self._shadows.pop(request_id, None)
        if shadow is not None and self.kv_cache is not None:
            self.kv_cache.free(shadow.request)

    # -- helpers -----------------------------------------------------------------------------
    def _sync(self, inp: ProposalInput) -> _Shadow:
        """The request's shadow, cut back to what it shares with ``inp.token_ids`` and extended to them."""
        tokens = inp.token_ids
        shadow = self._shadows.get(inp.request_id)
        if shadow is None:
            req = Request(inp.request_id, list(tokens), GREEDY, status=RequestStatus.RUNNING)
            shadow = self._shadows[inp.request_id] = _Shadow(req, len(tokens))
            return shadow
        req = shadow.request
        common = shadow.num_synced
        limit = min(len(tokens), req.num_tokens)
        while common < limit and req.token_ids[common] == tokens[common]:
            common += 1
        del req.token_ids[common:]
        req.token_ids.extend(tokens[common:])
        req.num_computed_tokens = min(req.num_computed_tokens, common, len(tokens) - 1)
        self.kv_cache.trim(req, req.num_computed_tokens)
        shadow.num_synced = len(tokens)
        return shadow

    def _plan(self, request_id: str, verified: list[int], k: int, column: int) -> "draft_prelaunch.PrelaunchedRow | None":
        """The round of a shadow whose drafts are being verified (None: it is not in that state, or
        its cache or context has no room for the round's worst case)."""
        shadow = self._shadows.get(request_id)
        if shadow is None:
            return None
        req, base = shadow.request, shadow.num_synced
        held = req.num_tokens - base
        if not 0 < len(verified) <= held or req.token_ids[base : base + len(verified)] != verified:
            return None
        if req.num_computed_tokens != req.num_tokens - 1 or req.num_tokens + k + 1 > self.max_model_len:
            return None
        if not self.kv_cache.allocate_slots(req, k + 1):  # the worst case: all accepted, k more drafts
            return None
        rows = draft_prelaunch.outcome_rows(base, verified, held, req.token_ids[-1], k,
                                            self.kv_cache.block_ids(request_id))
        return draft_prelaunch.PrelaunchedRow(shadow, base, verified, held, rows, column)

    def _take_prelaunched(self, inputs: list[ProposalInput], budgets: dict[str, int]
                          ) -> tuple["draft_prelaunch.Prelaunched | None", dict[str, _Taken]]:
        """The inputs whose drafts a prelaunched round is computing for the outcome they show (read
        later: :meth:`_read_taken`). A request that moved on since its verify step (a step without
        proposals came between) takes the usual path."""
        prelaunched, self._prelaunched = self._prelaunched, None
        taken: dict[str, _Taken] = {}
        if prelaunched is None:
            return None, taken
        for inp in inputs:
            plan = prelaunched.rows.get(inp.request_id)
            if plan is None or self._shadows.get(inp.request_id) is not plan.shadow or budgets[inp.request_id] <= 0:
                continue
            tokens = inp.token_ids
            a = len(tokens) - plan.base - 1
            if not 0 <= a <= len(plan.drafts) or list(tokens[plan.base : plan.base + a]) != plan.drafts[:a]:
                continue  # stale: the request moved on since (a step without proposals); its shadow is cut back
            taken[inp.request_id] = _Taken(plan, a, list(tokens[plan.base :]),
                                           min(plan.rows[a].steps, budgets[inp.request_id]))
        return prelaunched, taken

    def _on_device(self, prelaunched: "draft_prelaunch.Prelaunched", taken: dict[str, "_Taken"],
                   inputs: list[ProposalInput]) -> DeviceDrafts:
        """The taken drafts as the engine copies them on the device, and reads them after its launch."""
        position = {inp.request_id: i for i, inp in enumerate(inputs)}
        index = {position[rid]: prelaunched.positions(t.plan, t.count) for rid, t in taken.items()}

        def read() -> dict[int, list[int]]:
            return {position[rid]: drafted for rid, drafted in self._read_taken(prelaunched, taken).items()}

        return DeviceDrafts(prelaunched.tokens.view(-1), index, read)

    def _read_taken(self, prelaunched: "draft_prelaunch.Prelaunched", taken: dict[str, "_Taken"]) -> dict[str, list[int]]:
        """Wait for the round; move each taken shadow on as a round of its own would have. One whose
        outcome the device read otherwise than the host (a bug) loses its shadow (its drafts are still
        the ones the verify step got)."""
        columns, picked = prelaunched.read()
        drafts = {}
        for rid, t in taken.items():
            drafts[rid] = drafted = columns[t.plan.column][: t.count]
            if self._shadows.get(rid) is not t.plan.shadow:  # released meanwhile
                continue
            req = t.plan.shadow.request
            if picked[t.plan.column] != t.accepted:
                logger.warning("draft round queued behind the verify step assumed another outcome for %s: dropped", rid)
                self._drop(req)
                continue
            row = t.plan.rows[t.accepted]
            del req.token_ids[t.plan.base :]
            req.token_ids.extend(t.known)
            req.token_ids.extend(drafted)
            req.num_computed_tokens = min(row.start + row.computed, req.num_tokens - 1)
            t.plan.shadow.num_synced = t.plan.base + len(t.known)
        return drafts

    def _launch_fed(self, requests: list[Request], budgets: dict[str, int]) -> _Launched:
        """Queue the round of requests that are one or two tokens behind: a first step over their
        known tokens, then one step per draft."""
        requests = [req for req in requests if self._reserve(req, budgets[req.request_id])]
        rows = [self._fed_row(req, budgets[req.request_id]) for req in requests]
        return self._launch_chain(requests, rows, None)

    def _launch_behind(self, requests: list[Request], budgets: dict[str, int]) -> _Launched:
        """Queue the round of requests further behind (a new shadow's prompt): a step of the
        draft's runner over their uncomputed tokens (within the token budget) gives the first draft
        of those it completes; their other drafts follow in one-token steps."""
        first = self._first_step(requests)
        if first is None:
            return _Launched([], [], lambda: [], None)
        rows = [self._seeded_row(req, budgets[req.request_id] - 1) for req in first.requests]
        return self._launch_chain(first.requests, rows, first)

    def _launch_chain(self, requests: list[Request], rows: list[ChainRow], first: PendingStep | None) -> _Launched:
        if not rows:
            return _Launched([], [], lambda: [], None)
        chained = self.chain.run(rows, first.sample.token_ids if first is not None else None)  # [steps, rows]
        return _Launched(requests, rows, self.runner.platform.copy_to_host_async([chained]), first)

    def _first_step(self, requests: list[Request]) -> PendingStep | None:
        """Launch one draft step over ``requests``' uncomputed tokens (within the token budget),
        without waiting for it; the requests whose tokens were all computed sample in it."""
        scheduled, counts, budget = [], [], self.max_batch_tokens
        for req in sorted(requests, key=lambda r: r.num_tokens - r.num_computed_tokens):  # decodes first
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            if not self.kv_cache.allocate_slots(req, n):
                self._drop(req)
                continue
            scheduled.append(req)
            counts.append(n)
            budget -= n
        if not scheduled:
            return None
        tables = [self.kv_cache.block_ids(req.request_id) for req in scheduled]
        pending = self.runner.launch(SchedulerOutput(scheduled, counts), tables)
        for req, n in zip(scheduled, counts):
            req.num_computed_tokens += n
        return pending if pending.requests else None

    def _reserve(self, req: Request, budget: int) -> bool:
        """Hold KV slots for ``req``'s uncomputed tokens and ``budget - 1`` drafts (or, short of
        blocks, for one draft; else the shadow is dropped)."""
        behind = req.num_tokens - req.num_computed_tokens
        if self.kv_cache.allocate_slots(req, behind + budget - 1) or self.kv_cache.allocate_slots(req, behind):
            return True
        self._drop(req)
        return False

    def _fed_row(self, req: Request, budget: int) -> ChainRow:
        """``req``'s row: its uncomputed tokens, then ``budget`` drafts where its KV slots are held."""
        start, blocks = req.num_computed_tokens, self.kv_cache.block_ids(req.request_id)
        held = len(blocks) * self.kv_cache.block_size - start
        fed = tuple(req.token_ids[start:])
        return ChainRow(start, min(budget, held - len(fed) + 1), blocks, fed)

    def _seeded_row(self, req: Request, steps: int) -> ChainRow:
        """``req``'s row after its first draft: ``steps`` more drafts where its KV slots can be
        reserved (else none: the first draft only)."""
        if steps > 0 and not self.kv_cache.allocate_slots(req, steps):
            steps = 0
        return ChainRow(req.num_computed_tokens, steps, self.kv_cache.block_ids(req.request_id))

    def _drop(self, req: Request) -> None:
        """Forget a shadow that found no KV blocks (rebuilt from the prompt when it proposes again)."""
        logger.debug("draft KV cache full: dropping the shadow of %s", req.request_id)
        self.release(req.request_id)


def _check_compatible(hf_config, context: ProposerContext) -> None:
    draft_vocab, target_vocab = int(hf_config.vocab_size), int(context.hf_config.vocab_size)
    if draft_vocab != target_vocab:
        raise ConfigError(f"the draft model's vocabulary has {draft_vocab} tokens and the target's {target_vocab}: "
                          "a draft model must share the target's tokenizer (and vocab_size)")
    positions = getattr(hf_config, "max_position_embeddings", None)
    if positions is not None and positions < context.max_model_len:
        raise ConfigError(f"the draft model handles {positions} positions, fewer than max_model_len "
                          f"{context.max_model_len}; lower --max-model-len to {positions}")


def _cache_bytes(hf_config, context: ProposerContext) -> int:
    """Bytes for as many tokens as the target's cache holds, plus one block per sequence."""
    from pagoda.models.spec import attention_spec, num_kv_cache_layers

    block_size = context.engine_config.block_size
    spec = attention_spec(hf_config, block_size, context.dtype)
    element = torch.tensor([], dtype=context.dtype).element_size()
    per_block = 2 * num_kv_cache_layers(hf_config) * block_size * spec.num_kv_heads * spec.head_size * element
    blocks = context.num_kv_blocks + context.engine_config.max_num_seqs
    return math.ceil(blocks * per_block)
