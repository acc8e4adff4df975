"""SamplingParams: the sampling fields of a Generate request (baton.v1.SamplingParams), typed.

Every field is optional; one left as None is not sent, and the router applies the proto's default
(vLLM's: temperature 1, max_tokens 16, no stop strings, ...). The router checks the values and
names the field when one is out of range (INVALID_ARGUMENT)."""
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Sequence, Union


@dataclass
class SamplingParams:
    """`Client.generate(prompt, sampling=SamplingParams(max_tokens=64, temperature=0))`, or the same
    fields as keywords of generate()/stream(), which override the fields of `sampling`. An unknown
    field name raises TypeError, as for any Python call."""
    temperature: Optional[float] = None          # <= 1e-5: greedy; default 1
    top_k: Optional[int] = None                  # 0 or -1: off
    top_p: Optional[float] = None                # (0, 1]
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    seed: Optional[int] = None                   # same seed, same tokens (0 .. 2**64-1)
    max_tokens: Optional[int] = None             # default 16
    min_tokens: Optional[int] = None
    stop: Union[str, Sequence[str], None] = None  # stop strings: one, or a list
    stop_token_ids: Optional[Sequence[int]] = None
    ignore_eos: Optional[bool] = None
    include_stop_str_in_output: Optional[bool] = None
    logprobs: Optional[int] = None               # the sampled token's logprob plus the top n (0..20)
    max_speculative_tokens: Optional[int] = None  # caps the decode node's draft length; 0: no speculation
    logit_bias: Optional[Mapping[int, float]] = None  # token id -> bias in [-100, 100], added to its logit
    # OpenAI's response_format, as a dict or its JSON text: {"type": "json_object"} or
    # {"type": "json_schema", "json_schema": {"schema": {...}}}; the output is constrained to it.
    response_format: Union[str, Mapping[str, Any], None] = None

    def merged(self, overrides: "SamplingParams") -> "SamplingParams":
        """These fields, with those `overrides` sets (not None) replacing them."""
        return SamplingParams(**{f.name: getattr(overrides, f.name) if getattr(overrides, f.name) is not None
                                 else getattr(self, f.name) for f in fields(SamplingParams)})
