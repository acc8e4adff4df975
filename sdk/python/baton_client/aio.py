"""AsyncClient: the asyncio version of Client (grpc.aio), with the same methods as coroutines and
stream() as an async generator. Create it inside a running event loop."""
from typing import AsyncIterator, Optional

import grpc

from . import _auth, _convert
from ._proto import api_pb2, api_pb2_grpc
from .client import DEFAULT_TIMEOUT_S
from .errors import BatonError
from .values import Delta, GenerateResult, ModelInfo, TokenizeResult


class AsyncClient:
    """AsyncClient("host:port"), with Client's keywords (tls_ca, credentials, api_key, timeout);
    `async with AsyncClient(...) as c:` closes the channel at the end."""

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 credentials: Optional[grpc.ChannelCredentials] = None, tls_ca: Optional[str] = None,
                 api_key: Optional[str] = None, channel_options=None):
        self.target = target
        self.timeout = timeout
        credentials = _auth.channel_credentials(credentials, tls_ca)
        self._metadata = _auth.call_metadata(api_key)
        self._channel = (grpc.aio.secure_channel(target, credentials, options=channel_options) if credentials
                         else grpc.aio.insecure_channel(target, options=channel_options))
        self._stub = api_pb2_grpc.BatonStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _timeout(self, timeout: Optional[float]) -> float:
        return self.timeout if timeout is None else timeout

    async def stream(self, prompt: Optional[str] = None, *, timeout: Optional[float] = None,
                     **kwargs) -> AsyncIterator[Delta]:
        """Yields the completion's deltas as they arrive; arguments as Client.generate()."""
        request = _convert.generate_request(prompt, **kwargs)
        call = self._stub.Generate(request, timeout=self._timeout(timeout), metadata=self._metadata)
        try:
            async for message in call:
                yield _convert.delta(message)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        finally:
            call.cancel()

    async def generate(self, prompt: Optional[str] = None, *, timeout: Optional[float] = None,
                       **kwargs) -> GenerateResult:
        result = GenerateResult()
        async for d in self.stream(prompt, timeout=timeout, **kwargs):
            result.append(d)
        return result

    async def abort(self, request_id: str, *, timeout: Optional[float] = None) -> bool:
        try:
            r = await self._stub.Abort(api_pb2.AbortRequest(request_id=request_id), timeout=self._timeout(timeout),
                                       metadata=self._metadata)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return r.found

    async def model_info(self, *, timeout: Optional[float] = None) -> ModelInfo:
        try:
            r = await self._stub.GetModelInfo(api_pb2.GetModelInfoRequest(), timeout=self._timeout(timeout),
                                              metadata=self._metadata)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return _convert.model_info(r)

    async def tokenize(self, prompt: Optional[str] = None, *, messages=None, add_generation_prompt=None,
                       add_special_tokens: Optional[bool] = None, timeout: Optional[float] = None) -> TokenizeResult:
        request = _convert.tokenize_request(prompt, messages=messages, add_generation_prompt=add_generation_prompt,
                                            add_special_tokens=add_special_tokens)
        try:
            r = await self._stub.Tokenize(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return TokenizeResult(list(r.ids), r.prompt)
