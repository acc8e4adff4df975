"""BatonError: every failed call of the Baton client SDK raises it, with gRPC's status code and the
router's message (e.g. INVALID_ARGUMENT naming the field, UNAVAILABLE when no router or no healthy
decode node answers, DEADLINE_EXCEEDED when the call's timeout passed)."""
import grpc


class BatonError(Exception):
    """A failed Baton call. `code` is a grpc.StatusCode, `code_name` its name ("INVALID_ARGUMENT"),
    `message` what the server (or gRPC) said."""

    def __init__(self, code: grpc.StatusCode, message: str):
        self.code = code
        self.code_name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        self.message = message
        super().__init__(f"{self.code_name}: {message}")

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "BatonError":
        # grpc.RpcError raised by a call is also a grpc.Call (sync) or AioRpcError (asyncio).
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code, details or "")
