"""baton_client: the Python client of Baton's public gRPC API (proto/baton/v1/api.proto).

    from baton_client import Client
    with Client("127.0.0.1:50051") as client:
        print(client.generate("def fibonacci(n):", max_tokens=64, temperature=0).text)

AsyncClient is the asyncio version. Failed calls raise BatonError (gRPC code and message).
"""
from .aio import AsyncClient
from .client import Client
from .errors import BatonError
from .values import (Delta, GenerateResult, ModelInfo, SpeculationUsage, Timings, TokenizeResult, TokenLogprob,
                     TopLogprob, Usage)

__version__ = "0.1.0"
__all__ = ["AsyncClient", "BatonError", "Client", "Delta", "GenerateResult", "ModelInfo", "SpeculationUsage",
           "Timings", "TokenizeResult", "TokenLogprob", "TopLogprob", "Usage"]
