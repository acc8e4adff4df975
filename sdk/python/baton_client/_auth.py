"""How a client reaches a router that takes TLS and API keys, and what metadata its calls carry:
the channel credentials (an explicit grpc.ChannelCredentials, or TLS verifying the router against a
CA file such as the ca.pem that `baton up --tls` prints) and the call metadata: `authorization:
Bearer KEY` (the key given, else the environment's BATON_API_KEY), the client's own metadata and
each call's. Shared by Client and AsyncClient."""
import os
from typing import Iterable, Mapping, Optional, Tuple, Union

import grpc

MetadataValue = Union[str, bytes]
# gRPC metadata: a mapping or (key, value) pairs. Keys are case-insensitive (sent lowercase); a key
# ending in "-bin" carries bytes, any other an ASCII str.
Metadata = Union[Mapping[str, MetadataValue], Iterable[Tuple[str, MetadataValue]]]
Pairs = Tuple[Tuple[str, MetadataValue], ...]


def channel_credentials(credentials: Optional[grpc.ChannelCredentials],
                        tls_ca: Optional[str]) -> Optional[grpc.ChannelCredentials]:
    if credentials is not None and tls_ca is not None:
        raise ValueError("give credentials or tls_ca, not both")
    if tls_ca is None:
        return credentials
    try:
        with open(tls_ca, "rb") as f:
            return grpc.ssl_channel_credentials(root_certificates=f.read())
    except OSError as e:
        raise ValueError(f"cannot read the CA certificate file {tls_ca}: {e.strerror}") from None


def _pairs(metadata: Metadata, what: str) -> Pairs:
    if isinstance(metadata, (str, bytes)):
        raise TypeError(f"{what}: expected a mapping or (key, value) pairs, got {type(metadata).__name__}")
    items = metadata.items() if isinstance(metadata, Mapping) else metadata
    out = []
    for item in items:
        try:
            key, value = item
        except (TypeError, ValueError):
            raise TypeError(f"{what}: expected (key, value) pairs, got {item!r}") from None
        if not isinstance(key, str) or not isinstance(value, (str, bytes)):
            raise TypeError(f"{what}: a key is a str and a value a str or bytes, got {item!r}")
        out.append((key.lower(), value))
    return tuple(out)


class CallMetadata:
    """The metadata of a client's calls: the API key's `authorization` first, then the client's
    metadata, then the call's (a call's entries replace the client's of the same key). While a key
    is set (`api_key`, or BATON_API_KEY when api_key is None), metadata may not carry its own
    `authorization`: ValueError, rather than sending two credentials or silently dropping one."""

    def __init__(self, api_key: Optional[str], metadata: Optional[Metadata]):
        key = api_key if api_key is not None else os.environ.get("BATON_API_KEY", "")
        self._key_source = ("api_key" if api_key is not None else "BATON_API_KEY") if key else None
        self._auth: Pairs = (("authorization", f"Bearer {key}"),) if key else ()
        self._client = self._checked(metadata, "metadata") if metadata is not None else ()

    def _checked(self, metadata: Metadata, what: str) -> Pairs:
        pairs = _pairs(metadata, what)
        if self._key_source is not None and any(k == "authorization" for k, _ in pairs):
            raise ValueError(f"{what}: 'authorization' would override the API key set by {self._key_source}; "
                             "give the key one way only")
        return pairs

    def __call__(self, metadata: Optional[Metadata] = None) -> Pairs:
        """The metadata to send with one call, given its own `metadata`."""
        if metadata is None:
            return self._auth + self._client
        call = self._checked(metadata, "metadata")
        replaced = {k for k, _ in call}
        return self._auth + tuple(p for p in self._client if p[0] not in replaced) + call
