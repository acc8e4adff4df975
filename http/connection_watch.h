// Notices when an HTTP client closes its connection while its request runs, so that the request is
// cancelled on every node even while nothing is written to the client (a non-streamed completion,
// or a stream between tokens). One thread polls every watched socket for the peer's hang-up
// (POLLRDHUP, which Asio's waits do not offer: a TLS client's close_notify would look like data).
//
// Thread-safety: every method may be called from any thread. on_close runs on the watch's thread
// and must not block. Must not: read from or write to the sockets it watches (the listener owns them).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace baton::http {

class ConnectionWatch {
 public:
  ConnectionWatch();
  ~ConnectionWatch();
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  // Watching one socket until destroyed; on_close is called at most once.
  class Registration {
   public:
    Registration(ConnectionWatch& watch, std::uint64_t id) : watch_(watch), id_(id) {}
    ~Registration() { watch_.remove(id_); }

   private:
    ConnectionWatch& watch_;
    std::uint64_t id_;
  };
  // Unregister (destroy the Registration) before closing `fd`: the number may be reused at once.
  std::unique_ptr<Registration> watch(int fd, std::function<void()> on_close);

 private:
  struct Entry {
    int fd;
    std::function<void()> on_close;
  };
  void remove(std::uint64_t id);
  void wake();
  void loop();

  std::mutex mu_;
  std::map<std::uint64_t, Entry> entries_;
  std::uint64_t next_id_ = 1;
  bool stopping_ = false;
  int wake_fd_ = -1;  // eventfd: the set changed, or stop
  std::thread thread_;
};

}  // namespace baton::http
