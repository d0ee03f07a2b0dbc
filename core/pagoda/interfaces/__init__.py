"""Typed interfaces of the seven plugin kinds. Plugins subclass these."""

from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.base import Capability
from pagoda.interfaces.guided import GrammarMatcher, GuidedDecodingBackend
from pagoda.interfaces.model import BuildContext, CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer
from pagoda.interfaces.quantization import InputQuantizer, QuantizationMethod, QuantizedInput
from pagoda.interfaces.scheduler import Scheduler, SchedulerConfig, SchedulerOutput

__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "AttentionSpec",
    "BuildContext",
    "Capability",
    "CausalLM",
    "ForwardContext",
    "GrammarMatcher",
    "GuidedDecodingBackend",
    "InputQuantizer",
    "Platform",
    "Proposal",
    "ProposalInput",
    "Proposer",
    "QuantizationMethod",
    "QuantizedInput",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
]
