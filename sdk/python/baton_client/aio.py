"""AsyncClient: the asyncio version of Client (grpc.aio), with the same methods and arguments as
coroutines and stream() as an async iterator. Create it inside a running event loop."""
from typing import Any, AsyncIterator, Iterable, Mapping, Optional, Sequence, Union

import grpc

from . import _auth, _convert
from ._auth import Metadata
from ._convert import Messages, Tools
from ._proto import api_pb2, api_pb2_grpc
from .client import DEFAULT_TIMEOUT_S, ChannelOptions
from .errors import BatonError
from .sampling import SamplingParams
from .values import Delta, GenerateResult, ModelInfo, TokenizeResult


class AsyncClient:
    """AsyncClient("host:port"), with Client's keywords (tls_ca, credentials, api_key, metadata,
    timeout, channel_options); `async with AsyncClient(...) as c:` closes the channel at the end."""

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 credentials: Optional[grpc.ChannelCredentials] = None, tls_ca: Optional[str] = None,
                 api_key: Optional[str] = None, metadata: Optional[Metadata] = None,
                 channel_options: Optional[ChannelOptions] = None):
        self.target = target
        self.timeout = timeout
        credentials = _auth.channel_credentials(credentials, tls_ca)
        self._metadata = _auth.CallMetadata(api_key, metadata)
        self._channel = (grpc.aio.secure_channel(target, credentials, options=channel_options) if credentials
                         else grpc.aio.insecure_channel(target, options=channel_options))
        self._stub = api_pb2_grpc.BatonStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
               timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> AsyncIterator[Delta]:
        """`async for delta in client.stream(...)`: the completion's deltas as they arrive; arguments
        as Client.generate(), checked here (the request starts at the first iteration)."""
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

    async def _stream(self, request: api_pb2.GenerateRequest, timeout: float,
                      metadata: _auth.Pairs) -> AsyncIterator[Delta]:
        call = self._stub.Generate(request, timeout=timeout, metadata=metadata)
        try:
            async for message in call:
                yield _convert.delta(message)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        finally:
            call.cancel()

    async def generate(self, prompt: Optional[str] = None, *, token_ids: Optional[Iterable[int]] = None,
                       messages: Optional[Messages] = None, add_generation_prompt: Optional[bool] = None,
                       tools: Optional[Tools] = None,
                       sampling: Optional[SamplingParams] = None,
                       max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                       top_k: Optional[int] = None, top_p: Optional[float] = None, min_p: Optional[float] = None,
                       repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                       frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
                       min_tokens: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                       stop_token_ids: Optional[Sequence[int]] = None, ignore_eos: Optional[bool] = None,
                       include_stop_str_in_output: Optional[bool] = None, logprobs: Optional[int] = None,
                       max_speculative_tokens: Optional[int] = None, logit_bias: Optional[Mapping[int, float]] = None,
                       response_format: Union[str, Mapping[str, Any], None] = None,
                       request_id: str = "", force_local_prefill: bool = False, cache_salt: str = "",
                       timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> GenerateResult:
        """One whole completion; arguments as Client.generate()."""
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
        async for d in stream:
            result.append(d)
        return result

    async def abort(self, request_id: str, *, timeout: Optional[float] = None,
                    metadata: Optional[Metadata] = None) -> bool:
        try:
            r = await self._stub.Abort(api_pb2.AbortRequest(request_id=request_id), timeout=self._timeout(timeout),
                                       metadata=self._metadata(metadata))
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return r.found

    async def model_info(self, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> ModelInfo:
        try:
            r = await self._stub.GetModelInfo(api_pb2.GetModelInfoRequest(), timeout=self._timeout(timeout),
                                              metadata=self._metadata(metadata))
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return _convert.model_info(r)

    async def tokenize(self, prompt: Optional[str] = None, *, messages: Optional[Messages] = None,
                       add_generation_prompt: Optional[bool] = None, tools: Optional[Tools] = None,
                       add_special_tokens: Optional[bool] = None,
                       timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> TokenizeResult:
        request = _convert.tokenize_request(prompt, messages=messages, add_generation_prompt=add_generation_prompt,
                                            tools=tools,
                                            add_special_tokens=add_special_tokens)
        try:
            r = await self._stub.Tokenize(request, timeout=self._timeout(timeout), metadata=self._metadata(metadata))
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return TokenizeResult(list(r.ids), r.prompt)
