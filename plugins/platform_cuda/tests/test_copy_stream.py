"""The sampled tokens' copies to the host (``CudaApiPlatform.copy_to_host_async``) on a stream of their own
(``beside=True``) or on the current stream (GPU): each copy holds the values its tensor had
when it was queued, behind a busy current stream, although the tensor is freed at once and the current
stream overwrites freshly allocated memory (which the allocator would hand back from the freed tensor's
block, were the copy stream not recorded on it)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("beside", [False, True])
def test_copies_hold_the_values_they_were_queued_with(beside: bool) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from pagoda_platform_cuda.platform import CudaPlatform

    platform = CudaPlatform()
    busy = torch.randn(4096, 4096, device="cuda")
    waits, expected = [], []
    for i in range(32):
        busy = busy @ busy / 64  # keeps the current stream busy, so a copy that did not wait for it reads early
        x = torch.arange(1000, device="cuda") * (i + 1)
        waits.append(platform.copy_to_host_async([x], beside=beside))
        del x
        torch.full((1000,), -1, dtype=torch.int64, device="cuda").add_(busy[0, 0].long())  # x's block, if free
        expected.append(torch.arange(1000) * (i + 1))
    for wait, values in zip(waits, expected):
        assert torch.equal(wait()[0], values)
