"""Client: the synchronous Python client of Baton's public gRPC API (baton.v1.Baton, served by
baton-router and `baton up`). One client holds one channel; it may be shared by threads. Every
call has a deadline: its `timeout` argument (seconds), else the client's default.

Must not: retry (the router already retried what may be retried) or hide a failed call: every
gRPC error becomes a BatonError with the status code and the server's message.
"""
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _auth, _convert
from ._auth import Metadata
from ._convert import Messages, Tools
from ._proto import api_pb2, api_pb2_grpc
from .errors import BatonError
from .sampling import SamplingParams
from .values import Delta, GenerateResult, ModelInfo, TokenizeResult

DEFAULT_TIMEOUT_S = 600.0

ChannelOptions = Sequence[Tuple[str, Any]]


class Client:
    """Client("host:port"). `tls_ca`: a CA certificate file to verify the router's TLS certificate
    with (e.g. the ca.pem `baton up --tls` prints), or `credentials`: any grpc.ChannelCredentials
    (default: plain text, as `baton up` serves without --tls); `api_key`: sent with every call as
    `authorization: Bearer KEY` (default: the environment's BATON_API_KEY, if set); `metadata`: gRPC
    metadata sent with every call (a mapping or (key, value) pairs; with an API key it may not hold
    `authorization`); `timeout`: the default deadline of each call in seconds; `channel_options`:
    grpc channel arguments."""

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 credentials: Optional[grpc.ChannelCredentials] = None, tls_ca: Optional[str] = None,
                 api_key: Optional[str] = None, metadata: Optional[Metadata] = None,
                 channel_options: Optional[ChannelOptions] = None):
        self.target = target
        self.timeout = timeout
        credentials = _auth.channel_credentials(credentials, tls_ca)
        self._metadata = _auth.CallMetadata(api_key, metadata)
        self._channel = (grpc.secure_channel(target, credentials, options=channel_options) if credentials
                         else grpc.insecure_channel(target, options=channel_options))
        self._stub = api_pb2_grpc.BatonStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _timeout(self, timeout: Optional[float]) -> float:
        return self.timeout if timeout is None else timeout

    def stream(self, prompt: Optional[str] = None, *, token_ids: Optional[Iterable[int]] = None,
               messages: Optional[Messages] = None, add_generation_prompt: Optional[bool] = None,
               tools: Optional[Tools] = None,
               sampling: Optional[SamplingParams] = None,
               max_tokens: Optional[int] = None, temperature: Optional[float] = None, top_k: Optional[int] = None,
               top_p: Optional[float] = None, min_p: Optional[float] = None,
               repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
               frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
               min_tokens: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
               stop_token_ids: Optional[Sequence[int]] = None, ignore_eos: Optional[bool] = None,
               include_stop_str_in_output: Optional[bool] = None, logprobs: Optional[int] = None,
               max_speculative_tokens: Optional[int] = None, logit_bias: Optional[Mapping[int, float]] = None,
               response_format: Union[str, Mapping[str, Any], None] = None,
               request_id: str = "", force_local_prefill: bool = False, cache_salt: str = "",
               timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> Iterator[Delta]:
        """Yields the completion's deltas as they arrive (the last has finish_reason and usage).
        Arguments as generate(); they are checked here, the request starts at the first next().
        Leaving the loop early cancels the request."""
        request = _convert.generate_request(
            prompt, token_ids=token_ids, messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
            request_id=request_id, force_local_prefill=force_local_prefill, cache_salt=cache_salt, sampling=sampling,
            keywords=SamplingParams(
                temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                presence_penalty=presence_penalty, frequency_penalty=frequency_penalty, seed=seed,
                max_tokens=max_tokens, min_tokens=min_tokens, stop=stop, stop_token_ids=stop_token_ids,
                ignore_eos=ignore_eos, include_stop_str_in_output=include_stop_str_in_output, logprobs=logprobs,
                max_speculative_tokens=max_speculative_tokens, logit_bias=logit_bias,
                response_format=response_format))
        return self._stream(request, self._timeout(timeout), self._metadata(metadata))

    def _stream(self, request: api_pb2.GenerateRequest, timeout: float, metadata: _auth.Pairs) -> Iterator[Delta]:
        call = self._stub.Generate(request, timeout=timeout, metadata=metadata)
        try:
            for message in call:
                yield _convert.delta(message)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        finally:
            call.cancel()  # a no-op once the call has ended

    def generate(self, prompt: Optional[str] = None, *, token_ids: Optional[Iterable[int]] = None,
                 messages: Optional[Messages] = None, add_generation_prompt: Optional[bool] = None,
                 tools: Optional[Tools] = None,
                 sampling: Optional[SamplingParams] = None,
                 max_tokens: Optional[int] = None, temperature: Optional[float] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, min_p: Optional[float] = None,
                 repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                 frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
                 min_tokens: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                 stop_token_ids: Optional[Sequence[int]] = None, ignore_eos: Optional[bool] = None,
                 include_stop_str_in_output: Optional[bool] = None, logprobs: Optional[int] = None,
                 max_speculative_tokens: Optional[int] = None, logit_bias: Optional[Mapping[int, float]] = None,
                 response_format: Union[str, Mapping[str, Any], None] = None,
                 request_id: str = "", force_local_prefill: bool = False, cache_salt: str = "",
                 timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> GenerateResult:
        """One whole completion. Give exactly one of `prompt` (text), `token_ids` or `messages`
        ([{"role": ..., "content": ...}] in OpenAI's shape, an assistant's `tool_calls` and tool
        messages' `tool_call_id` included, with `add_generation_prompt` and `tools`, OpenAI's tool
        list, which the chat template shows to the model; the reply comes back as text). Sampling: a
        SamplingParams as `sampling`, and/or its fields as keywords (max_tokens, temperature, top_k,
        top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty, seed, min_tokens, stop
        (str or list), stop_token_ids, ignore_eos, include_stop_str_in_output, logprobs,
        max_speculative_tokens, logit_bias, response_format), which override the object's; unset
        fields take the proto's defaults. Also request_id, force_local_prefill, cache_salt, `timeout`
        (seconds) and `metadata` (this call's gRPC metadata, after the client's). A completion the server ended
        with an error returns finish_reason "error" and `error`."""
        stream = self.stream(
            prompt, token_ids=token_ids, messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
            sampling=sampling, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, seed=seed, min_tokens=min_tokens, stop=stop,
            stop_token_ids=stop_token_ids, ignore_eos=ignore_eos, include_stop_str_in_output=include_stop_str_in_output,
            logprobs=logprobs, max_speculative_tokens=max_speculative_tokens, logit_bias=logit_bias,
            response_format=response_format,
            request_id=request_id, force_local_prefill=force_local_prefill, cache_salt=cache_salt, timeout=timeout,
            metadata=metadata)
        result = GenerateResult()
        for d in stream:
            result.append(d)
        return result

    def abort(self, request_id: str, *, timeout: Optional[float] = None,
              metadata: Optional[Metadata] = None) -> bool:
        """Stops a running request (every Delta carries its id). False: no running request has it
        (ids belong to the caller: with API keys, only the key that started a request can abort it)."""
        try:
            return self._stub.Abort(api_pb2.AbortRequest(request_id=request_id), timeout=self._timeout(timeout),
                                    metadata=self._metadata(metadata)).found
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None

    def model_info(self, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> ModelInfo:
        try:
            return _convert.model_info(self._stub.GetModelInfo(api_pb2.GetModelInfoRequest(),
                                                               timeout=self._timeout(timeout),
                                                               metadata=self._metadata(metadata)))
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None

    def tokenize(self, prompt: Optional[str] = None, *, messages: Optional[Messages] = None,
                 add_generation_prompt: Optional[bool] = None, tools: Optional[Tools] = None,
                 add_special_tokens: Optional[bool] = None,
                 timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> TokenizeResult:
        """Token ids of a text (with special tokens unless add_special_tokens=False) or of chat
        messages rendered with the model's template."""
        request = _convert.tokenize_request(prompt, messages=messages, add_generation_prompt=add_generation_prompt,
                                            tools=tools,
                                            add_special_tokens=add_special_tokens)
        try:
            r = self._stub.Tokenize(request, timeout=self._timeout(timeout), metadata=self._metadata(metadata))
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return TokenizeResult(list(r.ids), r.prompt)
