"""The kernel row order (regroup.py) and the 4-bit form (int4_form.py): exact rewrites of the weights."""

from __future__ import annotations

import pytest
import torch

from pagoda_quant_gptq.grouped import GroupedWeights
from pagoda_quant_gptq.int4_form import dequantize_form, to_int4
from pagoda_quant_gptq.packing import pack_columns, pack_rows, unpack_columns, unpack_rows
from pagoda_quant_gptq.regroup import kernel_group, plan_rows


def test_consecutive_groups_read_the_input_as_it_is() -> None:
    plan = plan_rows(torch.arange(256) // 128, 2)
    assert (plan.group, plan.identity, plan.padded, plan.row_groups.tolist()) == (128, True, False, [0, 1])


def test_act_order_on_one_rank_is_a_permutation() -> None:
    perm = torch.randperm(256, generator=torch.Generator().manual_seed(0))
    gid = torch.empty(256, dtype=torch.long)
    gid[perm] = torch.arange(256) // 64
    plan = plan_rows(gid, 4)
    assert plan.group == 64 and not plan.padded and not plan.identity
    assert torch.equal(gid[plan.order], torch.arange(256) // 64), "rows sorted by group"
    assert torch.equal(plan.order[:64], torch.sort(perm[:64]).values), "a group's rows keep their order"


def test_uneven_groups_are_padded_to_whole_kernel_groups() -> None:
    gid = torch.tensor([2] * 40 + [0] * 10 + [1] * 30)  # 80 rows of a row split
    plan = plan_rows(gid, 3)
    assert plan.group == 32 and plan.padded and plan.rows == 32 + 32 + 64
    assert plan.row_groups.tolist() == [0, 1, 2, 2]
    real = plan.order < 80
    assert sorted(plan.order[real].tolist()) == list(range(80)) and int((~real).sum()) == 128 - 80
    assert (gid[plan.order[real]] == plan.row_groups.repeat_interleave(32)[real]).all()


@pytest.mark.parametrize("counts, group", [([128, 128], 128), ([192], 64), ([96], 32), ([4096], 128), ([80], 32),
                                           ([0, 64], 64)])
def test_kernel_group_pads_least_and_prefers_large(counts: list[int], group: int) -> None:
    assert kernel_group(torch.tensor(counts)) == group


@pytest.mark.parametrize("bits", [4, 8])
def test_packing_round_trips(bits: int) -> None:
    values = torch.randint(0, 2**bits, (16, 24), generator=torch.Generator().manual_seed(bits))
    assert torch.equal(unpack_rows(pack_rows(values, bits), bits).long(), values)
    assert torch.equal(unpack_columns(pack_columns(values, bits), bits).long(), values)
    assert pack_columns(torch.tensor([[0, 0, 0, 0, 0, 0, 0, 9]]), 4).item() == 0x90000000 - 2**32  # little-endian


@pytest.mark.parametrize("bits", [4, 8])
def test_int4_form_is_an_exact_rewrite(bits: int) -> None:
    g = torch.Generator().manual_seed(bits)
    top = 2**bits
    gid = torch.randint(0, 3, (70,), generator=g)
    weights = GroupedWeights(torch.randint(0, top, (70, 16), generator=g), torch.randint(0, top + 1, (3, 16), generator=g),
                             torch.rand(3, 16, generator=g) + 0.5, gid, bits)
    weights.zeros[0, 0] = top  # at least one zero point past the kernels' nibble
    form = to_int4(weights)
    assert form.halves == bits // 4 and form.excess is not None
    assert int(form.q.max()) <= 15 and int(form.zeros.max()) <= 15
    x = torch.randn(3, 70, generator=g, dtype=torch.float64)
    x_in = torch.nn.functional.pad(x, (0, 1))[:, form.plan.order]  # pad rows read the zero column
    assert torch.allclose(x_in @ dequantize_form(form), x @ weights.dequantize(), rtol=1e-12, atol=1e-12)
