#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/status.h"

namespace baton {

namespace {

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

std::string base_name(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::start(Options options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("Subprocess: empty argv");
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->name_ = base_name(options.argv[0]);
  p->echo_ = options.echo;
  if (!options.log_path.empty()) {
    p->log_fd_ = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (p->log_fd_ < 0) {
      return absl::UnavailableError(str_cat("cannot write the log ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError(str_cat("pipe: ", std::strerror(errno)));
  std::vector<char*> argv;
  for (std::string& a : options.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(str_cat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: output into the pipe, default signal mask and dispositions, then exec.
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    for (const auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  p->pid_ = pid;
  p->out_fd_ = pipe_fds[0];
  p->pidfd_ = pidfd_open(pid);
  if (p->pidfd_ < 0) return absl::InternalError(str_cat("pidfd_open: ", std::strerror(errno)));
  p->reader_ = std::thread([raw = p.get()] { raw->read_output(); });
  return p;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_) terminate();
  if (reader_.joinable()) reader_.join();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (pidfd_ >= 0) ::close(pidfd_);
  if (log_fd_ >= 0) ::close(log_fd_);
}

void Subprocess::read_output() {
  std::string partial;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log_fd_ >= 0) (void)!::write(log_fd_, buf, static_cast<std::size_t>(n));
    if (echo_) (void)!::write(STDERR_FILENO, buf, static_cast<std::size_t>(n));
    partial.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0, nl;
    std::lock_guard<std::mutex> lock(mu_);
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      lines_.push_back(partial.substr(start, nl - start));
      start = nl + 1;
    }
    partial.erase(0, start);
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!partial.empty()) lines_.push_back(partial);
  output_closed_ = true;
  changed_.notify_all();
}

absl::StatusOr<std::string> Subprocess::wait_for_line(std::string_view needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  std::size_t seen = 0;
  for (;;) {
    for (; seen < lines_.size(); ++seen) {
      if (lines_[seen].find(needle) != std::string::npos) return lines_[seen];
    }
    if (output_closed_) break;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && seen == lines_.size()) {
      lock.unlock();
      return absl::DeadlineExceededError(str_cat(name_, " printed no line with '", needle, "' within ", timeout.count(),
                                                 " ms; its last output:\n", log_tail()));
    }
  }
  lock.unlock();
  // Output closed: the process is ending; report its status.
  const std::optional<int> code = wait(std::chrono::milliseconds(2000));
  return absl::FailedPreconditionError(str_cat(name_, " exited", code ? str_cat(" with status ", *code) : std::string(),
                                               " before printing '", needle, "'; its last output:\n", log_tail()));
}

bool Subprocess::reap(std::chrono::milliseconds timeout) {
  if (status_) return true;
  pollfd pfd{pidfd_, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) status_ = decode_status(status);
  return status_.has_value();
}

std::optional<int> Subprocess::exit_code() {
  reap(std::chrono::milliseconds(0));
  return status_;
}

std::optional<int> Subprocess::wait(std::chrono::milliseconds timeout) {
  reap(timeout);
  return status_;
}

int Subprocess::terminate(std::chrono::milliseconds grace) {
  if (status_) return *status_;
  ::kill(pid_, SIGTERM);
  if (!reap(grace)) {
    ::kill(pid_, SIGKILL);
    reap(std::chrono::milliseconds(10000));
  }
  return status_.value_or(-1);
}

int Subprocess::kill() {
  if (status_) return *status_;
  ::kill(pid_, SIGKILL);
  reap(std::chrono::milliseconds(10000));
  return status_.value_or(-1);
}

std::string Subprocess::log_tail(std::size_t lines) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const std::size_t first = lines_.size() > lines ? lines_.size() - lines : 0;
  for (std::size_t i = first; i < lines_.size(); ++i) out += str_cat("  ", lines_[i], "\n");
  return out;
}

}  // namespace baton
