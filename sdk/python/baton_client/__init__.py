"""baton_client: the Python client of Baton's public gRPC API (proto/baton/v1/api.proto).

    from baton_client import Client, SamplingParams
    with Client("127.0.0.1:50051") as client:
        print(client.generate("def fibonacci(n):", max_tokens=64, temperature=0).text)
        greedy = SamplingParams(temperature=0, max_tokens=64)
        print(client.generate("class Stack:", sampling=greedy, metadata={"x-request-tag": "demo"}).text)

AsyncClient is the asyncio version. Failed calls raise BatonError (gRPC code and message). The
package is typed (PEP 561): sampling fields are keyword arguments (or a SamplingParams), and an
unknown one raises TypeError.
"""
from ._auth import Metadata
from .aio import AsyncClient
from .client import Client
from .errors import BatonError
from .sampling import SamplingParams
from .values import (Delta, GenerateResult, ModelInfo, SpeculationUsage, Timings, TokenizeResult, TokenLogprob,
                     TopLogprob, Usage)

__version__ = "0.1.0"
__all__ = ["AsyncClient", "BatonError", "Client", "Delta", "GenerateResult", "Metadata", "ModelInfo",
           "SamplingParams", "SpeculationUsage", "Timings", "TokenizeResult", "TokenLogprob", "TopLogprob", "Usage"]
