"""Builds baton.v1 request messages from keyword arguments and turns responses into the SDK's
dataclasses. Shared by Client and AsyncClient. Validates only what the router cannot see (the
prompt's form); the router checks the values and names the field when one is wrong."""
import json
from dataclasses import fields
from typing import Any, Iterable, Mapping, Optional, Sequence

from ._proto import api_pb2
from .sampling import SamplingParams
from .values import Delta, ModelInfo, SpeculationUsage, Timings, TokenLogprob, TopLogprob, Usage

_FINISH = {
    api_pb2.FINISH_REASON_STOP: "stop",
    api_pb2.FINISH_REASON_LENGTH: "length",
    api_pb2.FINISH_REASON_ABORT: "abort",
    api_pb2.FINISH_REASON_ERROR: "error",
}

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]]


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _set_message(out: api_pb2.ChatMessage, m: Mapping[str, Any]) -> None:
    """OpenAI's message shape: role, content (None for an assistant's message of calls only), an
    assistant's tool_calls ([{"id", "type", "function": {"name", "arguments"}}], arguments as JSON
    text or a dict), a tool message's tool_call_id and name."""
    out.role = m["role"]
    if m.get("content") is not None:
        out.content = m["content"]
    elif not m.get("tool_calls"):
        raise KeyError("content")
    for call in m.get("tool_calls") or []:
        function = call["function"]
        out.tool_calls.add(id=call.get("id", ""), name=function["name"], arguments=_json_text(function["arguments"]))
    if m.get("tool_call_id") is not None:
        out.tool_call_id = m["tool_call_id"]
    if m.get("name") is not None:
        out.name = m["name"]


def _set_chat(out: api_pb2.ChatMessages, messages: Messages, add_generation_prompt: Optional[bool],
              tools: Optional[Tools] = None) -> None:
    for m in messages:
        try:
            _set_message(out.messages.add(), m)
        except (KeyError, TypeError) as e:
            raise ValueError(f"messages: every message needs a 'role' and a 'content' string (or, from the "
                             f"assistant, 'tool_calls'), got {m!r}") from e
    for t in tools or []:
        try:
            function = t["function"] if t.get("type", "function") == "function" else None
            tool = out.tools.add(name=function["name"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"tools: every tool is {{'type': 'function', 'function': {{'name', 'description', "
                             f"'parameters'}}}}, got {t!r}") from e
        if function.get("description") is not None:
            tool.description = function["description"]
        if function.get("parameters") is not None:
            tool.parameters = _json_text(function["parameters"])
    if add_generation_prompt is not None:
        out.add_generation_prompt = add_generation_prompt


def generate_request(prompt: Optional[str], *, token_ids: Optional[Iterable[int]], messages: Optional[Messages],
                     add_generation_prompt: Optional[bool], tools: Optional[Tools], request_id: str,
                     force_local_prefill: bool,
                     cache_salt: str, sampling: Optional[SamplingParams],
                     keywords: SamplingParams) -> api_pb2.GenerateRequest:
    """`keywords`: the sampling fields given as keywords, which override those of `sampling`."""
    given = [name for name, v in (("prompt", prompt), ("token_ids", token_ids), ("messages", messages)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of prompt, token_ids or messages (got {', '.join(given) or 'none'})")
    if tools and messages is None:
        raise ValueError("tools go with messages (the chat template shows them to the model)")
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling: expected a baton_client.SamplingParams, got {type(sampling).__name__}")
    params = sampling.merged(keywords) if sampling is not None else keywords
    r = api_pb2.GenerateRequest(request_id=request_id, force_local_prefill=force_local_prefill, cache_salt=cache_salt)
    if prompt is not None:
        r.text = prompt
    elif token_ids is not None:
        r.token_ids.ids.extend(token_ids)
    else:
        _set_chat(r.chat, messages, add_generation_prompt, tools)
    for f in fields(SamplingParams):
        value = getattr(params, f.name)
        if value is None:
            continue
        if f.name == "stop":
            r.sampling.stop.extend([value] if isinstance(value, str) else value)
        elif f.name == "stop_token_ids":
            r.sampling.stop_token_ids.extend(value)
        elif f.name == "logit_bias":
            for token, bias in value.items():
                r.sampling.logit_bias[token] = bias
        elif f.name == "response_format":
            r.sampling.response_format = value if isinstance(value, str) else json.dumps(value)
        else:
            setattr(r.sampling, f.name, value)
    return r


def tokenize_request(prompt: Optional[str] = None, *, messages: Optional[Messages] = None,
                     add_generation_prompt: Optional[bool] = None, tools: Optional[Tools] = None,
                     add_special_tokens: Optional[bool] = None) -> api_pb2.TokenizeRequest:
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt or messages")
    if tools and messages is None:
        raise ValueError("tools go with messages (the chat template shows them to the model)")
    r = api_pb2.TokenizeRequest()
    if prompt is not None:
        r.text = prompt
    else:
        _set_chat(r.chat, messages, add_generation_prompt, tools)
    if add_special_tokens is not None:
        r.add_special_tokens = add_special_tokens
    return r


def _usage(u: api_pb2.Usage) -> Usage:
    s, t = u.speculation, u.timings
    return Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                 cached_prompt_tokens=u.cached_prompt_tokens,
                 speculation=SpeculationUsage(s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens,
                                              list(s.accepted_per_position), list(s.proposals_by_length), s.lossy),
                 timings=Timings(t.time_to_first_token_ms, t.end_to_end_ms, t.prefill_ms, t.kv_transfer_ms,
                                 t.router_queue_ms),
                 prefill_node=u.prefill_node, decode_node=u.decode_node, local_prefill=u.local_prefill,
                 transport=u.transport)


def delta(m: api_pb2.GenerateResponse) -> Delta:
    finish = _FINISH.get(m.finish_reason)
    return Delta(request_id=m.request_id, token_ids=list(m.token_ids), text=m.text,
                 logprobs=[TokenLogprob(l.token, l.logprob, [TopLogprob(t.token, t.logprob) for t in l.top])
                           for l in m.logprobs],
                 finish_reason=finish, error=m.error,
                 stop_token=m.stop_token if m.HasField("stop_token") else None,
                 stop_string=m.stop_string if m.HasField("stop_string") else None,
                 usage=_usage(m.usage) if finish is not None else None,
                 kv_transfer_params=({"hidden_states_path": m.kv_transfer_params.hidden_states_path}
                                     if m.kv_transfer_params.hidden_states_path else None))


def model_info(i: api_pb2.ModelInfo) -> ModelInfo:
    return ModelInfo(i.model, i.vocab_size, i.max_model_len, i.has_tokenizer, i.has_chat_template,
                     i.speculative_config, i.num_prefill_nodes, i.num_decode_nodes, i.backend)
