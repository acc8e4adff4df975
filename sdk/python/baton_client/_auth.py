"""How a client reaches a router that takes TLS and API keys: the channel credentials (an explicit
grpc.ChannelCredentials, or TLS verifying the router against a CA file such as the ca.pem that
`baton up --tls` prints) and the call metadata carrying `authorization: Bearer KEY` (the key
given, else the environment's BATON_API_KEY). Shared by Client and AsyncClient."""
import os
from typing import Optional, Tuple

import grpc


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


def call_metadata(api_key: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    key = api_key if api_key is not None else os.environ.get("BATON_API_KEY", "")
    return (("authorization", f"Bearer {key}"),) if key else ()
