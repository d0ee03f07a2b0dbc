"""Request and response models of the pooling endpoints (runner "pooling"):

- ``POST /v1/embeddings``: OpenAI's embeddings API (``encoding_format`` float or base64, ``dimensions``);
- ``POST /score`` (``/v1/score``): vLLM's score API, ``text_1`` against ``text_2``;
- ``POST /rerank`` (``/v1/rerank``, ``/v2/rerank``): the Jina/Cohere rerank API as vLLM serves it.

``truncate_prompt_tokens`` (vLLM's extension) cuts each input to that many tokens (-1: the
model's length). Unknown fields are ignored, as OpenAI clients send optional fields.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

Int = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]  # msgpack's range (see protocol.py)
TokenIds = list[Annotated[int, Field(ge=0, le=2**63 - 1)]]
EmbeddingInput = Union[str, list[str], TokenIds, list[TokenIds]]


class PoolingFields(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    truncate_prompt_tokens: Int | None = None
    user: str | None = None
    priority: Int = 0


class EmbeddingRequest(PoolingFields):
    """``POST /v1/embeddings``."""

    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Int | None = None
    normalize: bool | None = None  # vLLM's extension: None uses the model's default (on)


class ScoreRequest(PoolingFields):
    """``POST /score``: one ``text_1`` against each ``text_2``, or pairwise for two lists of one length."""

    text_1: Union[str, list[str]]
    text_2: Union[str, list[str]]


class RerankRequest(PoolingFields):
    """``POST /rerank``: ``documents`` ordered by relevance to ``query``; ``top_n`` 0 or absent: all."""

    query: str
    documents: list[str]
    top_n: Int | None = None
    return_documents: bool = True


class EmbeddingData(BaseModel):
    index: int
    object: Literal["embedding"]
    embedding: Union[list[float], str]  # base64 of little-endian float32 for encoding_format "base64"


class PoolingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[EmbeddingData]
    usage: PoolingUsage


class ScoreData(BaseModel):
    index: int
    object: Literal["score"]
    score: float


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[ScoreData]
    usage: PoolingUsage


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    document: RerankDocument | None
    relevance_score: float


class RerankUsage(BaseModel):
    total_tokens: int


class RerankResponse(BaseModel):
    id: str
    model: str
    usage: RerankUsage
    results: list[RerankResult]
