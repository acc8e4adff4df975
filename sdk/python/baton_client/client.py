"""Client: the synchronous Python client of Baton's public gRPC API (baton.v1.Baton, served by
baton-router and `baton up`). One client holds one channel; it may be shared by threads. Every
call has a deadline: its `timeout` argument (seconds), else the client's default.

Must not: retry (the router already retried what may be retried) or hide a failed call: every
gRPC error becomes a BatonError with the status code and the server's message.
"""
from typing import Iterator, Optional

import grpc

from . import _auth, _convert
from ._proto import api_pb2, api_pb2_grpc
from .errors import BatonError
from .values import Delta, GenerateResult, ModelInfo, TokenizeResult

DEFAULT_TIMEOUT_S = 600.0


class Client:
    """Client("host:port"). `tls_ca`: a CA certificate file to verify the router's TLS certificate
    with (e.g. the ca.pem `baton up --tls` prints), or `credentials`: any grpc.ChannelCredentials
    (default: plain text, as `baton up` serves without --tls); `api_key`: sent with every call as
    `authorization: Bearer KEY` (default: the environment's BATON_API_KEY, if set); `timeout`: the
    default deadline of each call in seconds."""

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 credentials: Optional[grpc.ChannelCredentials] = None, tls_ca: Optional[str] = None,
                 api_key: Optional[str] = None, channel_options=None):
        self.target = target
        self.timeout = timeout
        credentials = _auth.channel_credentials(credentials, tls_ca)
        self._metadata = _auth.call_metadata(api_key)
        self._channel = (grpc.secure_channel(target, credentials, options=channel_options) if credentials
                         else grpc.insecure_channel(target, options=channel_options))
        self._stub = api_pb2_grpc.BatonStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _timeout(self, timeout: Optional[float]) -> float:
        return self.timeout if timeout is None else timeout

    def stream(self, prompt: Optional[str] = None, *, timeout: Optional[float] = None, **kwargs) -> Iterator[Delta]:
        """Yields the completion's deltas as they arrive (the last has finish_reason and usage).
        Arguments as generate(). Leaving the loop early cancels the request."""
        request = _convert.generate_request(prompt, **kwargs)
        call = self._stub.Generate(request, timeout=self._timeout(timeout), metadata=self._metadata)
        try:
            for message in call:
                yield _convert.delta(message)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        finally:
            call.cancel()  # a no-op once the call has ended

    def generate(self, prompt: Optional[str] = None, *, timeout: Optional[float] = None, **kwargs) -> GenerateResult:
        """One whole completion. Give exactly one of `prompt` (text), `token_ids` or `messages`
        ([{"role": ..., "content": ...}], with `add_generation_prompt`); sampling as keywords:
        max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
        frequency_penalty, seed, min_tokens, stop (str or list), stop_token_ids, ignore_eos,
        include_stop_str_in_output, logprobs; and request_id, force_local_prefill.
        A completion the server ended with an error returns finish_reason "error" and `error`."""
        result = GenerateResult()
        for d in self.stream(prompt, timeout=timeout, **kwargs):
            result.append(d)
        return result

    def abort(self, request_id: str, *, timeout: Optional[float] = None) -> bool:
        """Stops a running request (every Delta carries its id). False: no running request has it."""
        try:
            return self._stub.Abort(api_pb2.AbortRequest(request_id=request_id), timeout=self._timeout(timeout),
                                    metadata=self._metadata).found
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None

    def model_info(self, *, timeout: Optional[float] = None) -> ModelInfo:
        try:
            return _convert.model_info(self._stub.GetModelInfo(api_pb2.GetModelInfoRequest(),
                                                               timeout=self._timeout(timeout), metadata=self._metadata))
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None

    def tokenize(self, prompt: Optional[str] = None, *, messages=None, add_generation_prompt=None,
                 add_special_tokens: Optional[bool] = None, timeout: Optional[float] = None) -> TokenizeResult:
        """Token ids of a text (with special tokens unless add_special_tokens=False) or of chat
        messages rendered with the model's template."""
        request = _convert.tokenize_request(prompt, messages=messages, add_generation_prompt=add_generation_prompt,
                                            add_special_tokens=add_special_tokens)
        try:
            r = self._stub.Tokenize(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise BatonError.from_rpc_error(e) from None
        return TokenizeResult(list(r.ids), r.prompt)
