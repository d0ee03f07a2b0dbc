"""The driver's step messages keep the workers' mirror of requests and block tables equal to the
driver's, through growth, preemption and speculative decoding's trims (rejected drafts drop tokens
and last blocks; the blocks allocated next may be other ones)."""

from __future__ import annotations

import pytest

from pagoda.request import Request
from pagoda.executor import messages
from pagoda.executor.messages import TAIL_BLOCKS, StepEncoder, StepMirror, unchanged_blocks
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.sampling_params import SamplingParams


@pytest.mark.parametrize("table, sent, tail, keep", [
    ([1, 2, 3, 4], 3, [1, 2, 3], 3),  # grown at the end
    ([1, 2], 3, [1, 2, 3], 2),  # trimmed
    ([1, 2, 9], 3, [1, 2, 3], 2),  # trimmed, then another block
    ([1, 2, 9, 10], 3, [1, 2, 3], 2),
    ([7, 8], 0, [], 0),  # new, or after a preemption
    (list(range(20)), 20, list(range(12, 20)), 20),  # only the tail is compared
    (list(range(10)), 20, list(range(12, 20)), 0),  # shorter than where the tail starts: all again
    (list(range(15)) + [99], 20, list(range(12, 20)), 15),
])
def test_unchanged_blocks(table, sent, tail, keep) -> None:
    assert unchanged_blocks(table, sent, tail) == keep


def test_the_mirror_follows_growth_trims_and_preemptions() -> None:
    driver = Request("r", list(range(100, 108)), SamplingParams(max_tokens=64))
    encoder, mirror = StepEncoder(), StepMirror()

    def send(num_tokens: int, table: list[int], preempted: bool = False) -> None:
        out = SchedulerOutput([driver], [num_tokens], preempted=[driver] if preempted else [])
        message = messages.decode(messages.encode(encoder.step(out, [table], has_prev=False)))
        got, tables = mirror.apply(message)
        assert tables == [table]
        worker = got.requests[0]
        assert worker.token_ids == driver.token_ids and worker.num_draft_tokens == driver.num_draft_tokens
        assert worker.num_computed_tokens == driver.num_computed_tokens

    send(8, [1, 2])  # the prompt, block size 4
    driver.num_computed_tokens = 8
    driver.append_token(5)
    driver.add_drafts([6, 7, 8, 9, 10])  # a verify step of 6 tokens: a third block
    send(6, [1, 2, 3, 4])
    driver.drop_drafts(1)  # 1 accepted, 4 rejected: their tokens and the last block go
    driver.num_draft_tokens, driver.num_computed_tokens = 0, 10
    driver.append_token(11)  # the target's token after the accepted draft
    send(1, [1, 2, 3])
    driver.num_computed_tokens = 11
    driver.add_drafts([12, 13, 14])
    send(4, [1, 2, 3, 9])  # another block where 4 was
    driver.num_computed_tokens = 0
    send(8, [5, 6], preempted=True)  # preempted: a new table
    long_table = list(range(40, 40 + 3 * TAIL_BLOCKS))
    send(1, long_table)
    send(1, long_table[:-2] + [70])
    send(1, long_table[:2])
