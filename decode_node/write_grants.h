// WriteGrants: the prefill nodes a decode node has allowed to write a reservation's blocks, and
// the watch that tells when such a writer is done after its reservation ended early.
//
// Why: a prefill node's UCX puts land in this node's memory without passing through it, and once
// posted they cannot be revoked. A reservation released (the router gave up on a stopped prefill
// node and retried elsewhere), aborted or expired while its writer still runs must not hand its
// blocks to another request: the engine quarantines them (Engine::grant_writes). This class ends
// each quarantine as soon as the writer is known to be done:
//   - the writer says so: its Commit (accepted or refused) arrives — take(capability);
//   - or a probe of the writer (its Abort of the request, every `probe_interval`) answers that it
//     holds no such request any more (it aborts it otherwise, so the next probe finds it gone);
//   - or the writer is gone: `dead_after` probes in a row fail with UNAVAILABLE (nothing listens
//     at its address: the process exited; a stopped process accepts connections and does not
//     answer, so it is still a writer).
// Otherwise the engine reclaims the blocks at its write_quarantine_limit.
//
// Threads: add/take/forget from any thread; one probe thread, idle unless a grant exists. The
// engine is reached only through the two callbacks (the caller posts them to its engine loop).
//
// Must not: end a quarantine on a timeout or a missing answer (a stopped writer still writes when
// it is continued), or probe an address no authenticated sender gave.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "baton/v1/node.grpc.pb.h"
#include "engine/engine.h"

namespace baton {

struct WriteGrantsOptions {
  std::chrono::milliseconds probe_interval{1000};
  std::chrono::milliseconds probe_timeout{500};
  int dead_after = 2;  // UNAVAILABLE probes in a row that prove a writer gone
};

class WriteGrants {
 public:
  struct Grant {
    std::string request_id;
    std::string capability;      // the reservation's token (the writer's Abort takes it too)
    std::string sender_address;  // the writer's gRPC address; empty: never probed
  };
  // The engine's state of each ticket (same order), or nullopt when the engine did not answer in
  // time (that round probes nobody).
  using StateQuery = std::function<std::optional<std::vector<WriteGrantState>>(const std::vector<std::uint64_t>&)>;
  using EndWrites = std::function<void(std::uint64_t ticket)>;

  WriteGrants(StateQuery states, EndWrites end_writes, WriteGrantsOptions options = {});
  ~WriteGrants();  // stops the probe thread
  WriteGrants(const WriteGrants&) = delete;
  WriteGrants& operator=(const WriteGrants&) = delete;

  // A new ticket (> 0) for `grant`; hand it to Engine::grant_writes.
  std::uint64_t add(Grant grant);
  // The writer holding `capability` said it is done (its Commit): the grant's ticket, forgotten
  // here; call end_writes with it. nullopt when no grant has that token.
  std::optional<std::uint64_t> take(const std::string& capability);
  std::size_t size();

 private:
  struct Entry {
    Grant grant;
    int unavailable = 0;  // UNAVAILABLE probes in a row
  };
  void run();
  void probe_round();
  // True when the writer at the entry's address is known to be done with it.
  bool writer_done(Entry& entry);
  node::v1::PrefillNode::Stub& stub(const std::string& address);

  StateQuery states_;
  EndWrites end_writes_;
  WriteGrantsOptions options_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::uint64_t next_ticket_ = 1;
  std::map<std::uint64_t, Entry> grants_;
  std::map<std::string, std::unique_ptr<node::v1::PrefillNode::Stub>> stubs_;  // probe thread only
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace baton
