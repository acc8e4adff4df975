#include "tcp_kv_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "common/status.h"

namespace baton::kv::testing {
namespace {

absl::Status errno_error(const char* what) { return absl::UnavailableError(str_cat(what, ": ", std::strerror(errno))); }

class TcpKvLink final : public KvLink {
 public:
  TcpKvLink(int fd, bool stall_receives) : fd_(fd), stall_(stall_receives), worker_([this] { work(); }) {}
  ~TcpKvLink() override {
    abort();
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    ::close(fd_);
  }

  absl::Status post_sends(std::span<const LinkPiece> pieces) override { return post(pieces, /*send=*/true); }
  absl::Status post_receives(std::span<const LinkPiece> pieces) override { return post(pieces, /*send=*/false); }

  void when_done(DoneCallback done) override {
    {
      std::lock_guard lock(mu_);
      ops_.push_back(Op{nullptr, 0, false, std::move(done)});
    }
    cv_.notify_all();
  }

  void abort() override {
    {
      std::lock_guard lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      if (error_.ok()) error_ = absl::CancelledError("the tcp link was aborted");
    }
    ::shutdown(fd_, SHUT_RDWR);
    cv_.notify_all();
  }

 private:
  // A piece to move, or (with `done`) a marker that reports everything before it.
  struct Op {
    void* address;
    std::uint64_t bytes;
    bool send;
    DoneCallback done;
  };

  absl::Status post(std::span<const LinkPiece> pieces, bool send) {
    {
      std::lock_guard lock(mu_);
      if (!error_.ok()) return error_;
      for (const LinkPiece& p : pieces) ops_.push_back(Op{p.address, p.bytes, send, nullptr});
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  // Moves one piece; false (and error_ set) when the connection failed.
  bool move_piece(const Op& t) {
    std::vector<char> discard;
    char* p = static_cast<char*>(t.address);
    if (p == nullptr) {
      discard.resize(t.bytes);
      p = discard.data();
    }
    std::uint64_t done = 0;
    while (done < t.bytes) {
      const ssize_t n = t.send ? ::send(fd_, p + done, t.bytes - done, MSG_NOSIGNAL) : ::recv(fd_, p + done, t.bytes - done, 0);
      if (n > 0) {
        done += static_cast<std::uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mu_);
      if (error_.ok()) error_ = n == 0 ? absl::UnavailableError("the tcp link's peer closed it") : errno_error("tcp link");
      return false;
    }
    return true;
  }

  void work() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
      if (ops_.empty()) return;  // stopping
      Op op = std::move(ops_.front());
      ops_.pop_front();
      if (op.done) {
        const absl::Status status = error_;
        lock.unlock();
        op.done(status);
        lock.lock();
        continue;
      }
      const Op& t = op;
      if (!error_.ok()) continue;
      if (stall_ && !t.send) {
        cv_.wait(lock, [&] { return aborted_; });
        continue;
      }
      lock.unlock();
      move_piece(t);
      lock.lock();
    }
  }

  const int fd_;
  const bool stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  absl::Status error_;
  bool aborted_ = false;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

TcpKvLinkFactory::~TcpKvLinkFactory() {
  for (auto& [id, fd] : listeners_) ::close(fd);
}

int TcpKvLinkFactory::links() const {
  std::lock_guard lock(mu_);
  return links_;
}

absl::StatusOr<std::string> TcpKvLinkFactory::new_link_id() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const absl::Status s = errno_error("tcp link listener");
    ::close(fd);
    return s;
  }
  const std::string id = std::to_string(ntohs(addr.sin_port));
  std::lock_guard lock(mu_);
  listeners_[id] = fd;
  return id;
}

absl::StatusOr<std::unique_ptr<KvLink>> TcpKvLinkFactory::join(const std::string& link_id, int rank, Deadline deadline,
                                                               const std::function<bool()>& give_up) {
  int fd = -1;
  if (rank == 0) {
    int listener = -1;
    {
      std::lock_guard lock(mu_);
      auto it = listeners_.find(link_id);
      if (it == listeners_.end()) return absl::InvalidArgumentError(str_cat("tcp link id '", link_id, "' is not ours"));
      listener = it->second;
      listeners_.erase(it);
    }
    for (;;) {
      if (give_up()) {
        ::close(listener);
        return absl::CancelledError("the peer will not join the tcp link");
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        ::close(listener);
        return absl::DeadlineExceededError("the peer did not join the tcp link in time");
      }
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 20))) > 0) break;
    }
    fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(listener);
    if (fd < 0) return errno_error("accept");
  } else {
    char* end = nullptr;
    const long port = std::strtol(link_id.c_str(), &end, 10);
    if (link_id.empty() || *end != '\0' || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(str_cat("tcp link id '", link_id, "' is not a port"));
    }
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno_error("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const absl::Status s = errno_error("connect to the tcp link");
      ::close(fd);
      return s;
    }
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::lock_guard lock(mu_);
  ++links_;
  return std::unique_ptr<KvLink>(std::make_unique<TcpKvLink>(fd, options_.stall_receives && rank == 1));
}

}  // namespace baton::kv::testing
