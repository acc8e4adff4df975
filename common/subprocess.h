// Subprocess: a child process whose stdout and stderr go, line by line, to a log file and to
// waiters (wait_for_line), for `baton up` and the integration tests that start real nodes. Exit is
// observed through a pidfd, so every wait has a deadline and none polls or sleeps.
//
// Must not: leave a child behind: the destructor terminates it (SIGTERM, then SIGKILL after a grace
// period) and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

class Subprocess {
 public:
  struct Options {
    std::vector<std::string> argv;  // argv[0] is the executable's path
    std::string log_path;           // "" keeps output in memory only (the last lines)
    std::vector<std::pair<std::string, std::string>> env;  // added to the parent's environment
    bool echo = false;              // also copy each line to this process's stderr
  };

  static absl::StatusOr<std::unique_ptr<Subprocess>> start(Options options);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // The first output line containing `needle` (from the start of the output). DeadlineExceeded
  // after `timeout`; FailedPrecondition when the process ended first. Both carry the log tail.
  absl::StatusOr<std::string> wait_for_line(std::string_view needle, std::chrono::milliseconds timeout);

  pid_t pid() const { return pid_; }
  // Readable (poll POLLIN) once the process has ended.
  int pidfd() const { return pidfd_; }
  // The exit status once the process has ended (WEXITSTATUS, or 128 + signal).
  std::optional<int> exit_code();
  // Waits for the process to end; nullopt at the deadline.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; returns the exit status.
  int terminate(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // SIGKILL now (fault injection); returns the exit status.
  int kill();
  // The last `lines` lines of output.
  std::string log_tail(std::size_t lines = 30) const;
  const std::string& name() const { return name_; }

 private:
  Subprocess() = default;
  void read_output();  // the reader thread
  bool reap(std::chrono::milliseconds timeout);

  std::string name_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  int log_fd_ = -1;
  bool echo_ = false;
  std::optional<int> status_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;  // every line so far (servers print little); tail for errors
  bool output_closed_ = false;
  std::thread reader_;
};

}  // namespace baton
