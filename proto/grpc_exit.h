// grpc_exit: lets a process that used gRPC return from main() only once gRPC has shut down.
//
// When a process's last channel, server or completion queue goes away, gRPC finishes tearing it
// down on gRPC's own threads (about 100 ms after a client channel to an unreachable node, measured
// here) and shuts itself down there. A process that returns from main() meanwhile runs its static
// destructors beside those threads, and gRPC 1.51 then now and then aborts ("assertion failed:
// prior > 0" in ref_counted.h), turning a clean exit into SIGABRT. Every binary and test that uses
// gRPC calls this last in main().
//
// Must not: be called while gRPC objects are alive (it would wait out its deadline).
#pragma once

#include <chrono>

namespace baton {

// Waits until gRPC has shut down (at once if it is not running); false if it still runs at the
// deadline.
bool wait_for_grpc_shutdown(std::chrono::milliseconds deadline = std::chrono::seconds(5));

// main()'s last step: waits for gRPC as above (logging to stderr if it outlives the deadline), then
// returns `exit_code`.
int exit_after_grpc_shutdown(int exit_code);

}  // namespace baton
