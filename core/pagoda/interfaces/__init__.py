"""Typed interfaces of the plugin kinds. Plugins subclass these."""

from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.base import Capability
from pagoda.interfaces.command import Command
from pagoda.interfaces.guided import GrammarMatcher, GuidedDecodingBackend
from pagoda.interfaces.kv_connector import KVCacheLayout, KVConnector, KVConnectorContext
from pagoda.interfaces.model import BuildContext, CausalLM, ForwardContext, PoolingModel
from pagoda.interfaces.multimodal import ImageSpan, MultimodalEmbeddings, MultimodalModel
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer, ProposerContext
from pagoda.interfaces.quantization import InputQuantizer, QuantizationMethod, QuantizedInput
from pagoda.interfaces.reasoning_parser import ReasoningParser, ReasoningPiece
from pagoda.interfaces.scheduler import Scheduler, SchedulerConfig, SchedulerOutput, SchedulingPolicy, WaitingQueue
from pagoda.interfaces.tool_parser import ArgumentsPiece, CallStarted, TextPiece, ToolEvent, ToolParser

__all__ = [
    "ArgumentsPiece",
    "AttentionBackend",
    "AttentionMetadata",
    "AttentionSpec",
    "BuildContext",
    "CallStarted",
    "Capability",
    "Command",
    "CausalLM",
    "ForwardContext",
    "GrammarMatcher",
    "GuidedDecodingBackend",
    "ImageSpan",
    "InputQuantizer",
    "KVCacheLayout",
    "KVConnector",
    "KVConnectorContext",
    "MultimodalEmbeddings",
    "MultimodalModel",
    "Platform",
    "PoolingModel",
    "Proposal",
    "ProposalInput",
    "Proposer",
    "ProposerContext",
    "QuantizationMethod",
    "QuantizedInput",
    "ReasoningParser",
    "ReasoningPiece",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "SchedulingPolicy",
    "TextPiece",
    "ToolEvent",
    "ToolParser",
    "WaitingQueue",
]
