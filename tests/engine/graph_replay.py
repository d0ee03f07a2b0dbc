"""A CPU platform whose decode "graphs" rerun the step on their static buffers, and a torch attention backend
that declares itself graph-safe: what the CUDA graph path relies on, checked without a GPU.

tests/engine/test_decode_graphs.py registers the classes in-process; pipeline-parallel tests install this module
as a plugin (its hooks below) that every rank's process loads (:func:`install_for_every_rank`)."""

import importlib
import os

from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.hookspecs import hookimpl
from pagoda.interfaces.model import IntermediateTensors
from pagoda.platforms.cpu import CpuPlatform

REPLAYS = [0]  # replays in this process


class ReplayPlatform(CpuPlatform):
    priority = -1

    def supports_graphs(self) -> bool:
        return True

    def capture_graph(self, fn):
        out = fn()

        def replay():
            REPLAYS[0] += 1
            new = fn()
            pairs = ((out.hidden, new.hidden), (out.residual, new.residual)) if isinstance(out, IntermediateTensors) \
                else ((out, new),)
            for static, fresh in pairs:
                static.copy_(fresh)

        return replay, out


class GraphSafeTorchBackend(TorchAttentionBackend):
    priority = -1
    supports_graphs = True

    def prepare(self, metadata):  # replays rerun forward on the static buffers: derive nothing once per step
        return metadata if self.spec.causal else super().prepare(metadata)


@hookimpl
def register_platforms(register):
    register("replay-pp", ReplayPlatform)


@hookimpl
def register_attention_backends(register):
    register("torch-graphs-pp", GraphSafeTorchBackend)


def install_for_every_rank(tmp_path, monkeypatch) -> None:
    """Make this module an installed plugin (platform ``replay-pp``, attention ``torch-graphs-pp``) for this test:
    a distribution in ``tmp_path`` whose entry point every rank's process finds on PYTHONPATH."""
    from pagoda.plugins import manager as plugin_manager

    info = tmp_path / "pp_graph_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pp-graph-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pagoda.plugins]\npp_graph = graph_replay\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    here = os.path.dirname(__file__)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), here, *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setattr(plugin_manager, "_MANAGER", None)  # found again, with this plugin
    importlib.invalidate_caches()
