"""The values the Baton client SDK returns: plain dataclasses mirroring proto/baton/v1/api.proto
(package baton.v1), so that callers never handle protobuf messages. Field meanings are the proto's."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class TopLogprob:
    token: int
    logprob: float


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: List[TopLogprob] = field(default_factory=list)


@dataclass
class SpeculationUsage:
    num_drafts: int = 0          # verification steps that checked at least one draft token
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: List[int] = field(default_factory=list)  # [k], positions from 0
    proposals_by_length: List[int] = field(default_factory=list)    # [k + 1], by the draft length asked
    lossy: bool = False  # entropy verification verified its sampled drafts: not the model's distribution

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0


@dataclass
class Timings:
    """Milliseconds, measured by the router."""
    time_to_first_token_ms: float = 0.0
    end_to_end_ms: float = 0.0
    prefill_ms: float = 0.0
    kv_transfer_ms: float = 0.0
    router_queue_ms: float = 0.0


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    speculation: SpeculationUsage = field(default_factory=SpeculationUsage)
    timings: Timings = field(default_factory=Timings)
    prefill_node: str = ""       # "" when prefilled on the decode node
    decode_node: str = ""
    local_prefill: bool = False
    transport: str = ""          # "ucx", "grpc" or "" (local)


@dataclass
class Delta:
    """One streamed message: the tokens and text new in it. The last one has a finish_reason and usage."""
    request_id: str
    token_ids: List[int]
    text: str
    logprobs: List[TokenLogprob]
    finish_reason: Optional[str]     # None while running; "stop", "length", "abort" or "error"
    error: str = ""                  # finish_reason "error": what went wrong
    stop_token: Optional[int] = None
    stop_string: Optional[str] = None
    usage: Optional[Usage] = None
    # vLLM's kv_transfer_params, on the last Delta when a node set any: {"hidden_states_path": ...}
    # from speculative method extract_hidden_states (a path on the node that prefilled the prompt).
    kv_transfer_params: Optional[Dict[str, str]] = None


@dataclass
class GenerateResult:
    """A whole completion (every Delta joined)."""
    request_id: str = ""
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    logprobs: List[TokenLogprob] = field(default_factory=list)
    finish_reason: Optional[str] = None
    error: str = ""
    stop_token: Optional[int] = None
    stop_string: Optional[str] = None
    usage: Usage = field(default_factory=Usage)
    kv_transfer_params: Optional[Dict[str, str]] = None

    def append(self, d: Delta) -> None:
        self.request_id = self.request_id or d.request_id
        self.text += d.text
        self.token_ids.extend(d.token_ids)
        self.logprobs.extend(d.logprobs)
        if d.finish_reason is not None:
            self.finish_reason, self.error = d.finish_reason, d.error
            self.stop_token, self.stop_string = d.stop_token, d.stop_string
            if d.usage is not None:
                self.usage = d.usage
            self.kv_transfer_params = d.kv_transfer_params


@dataclass
class ModelInfo:
    model: str
    vocab_size: int
    max_model_len: int
    has_tokenizer: bool
    has_chat_template: bool
    speculative_config: str      # the decode nodes' config as JSON ("" without speculation)
    num_prefill_nodes: int
    num_decode_nodes: int
    backend: str = ""            # a decode node's engine, described


@dataclass
class TokenizeResult:
    ids: List[int]
    prompt: str                  # the rendered prompt (chat) or the text given
