#include "http/connection_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <vector>

namespace baton::http {

ConnectionWatch::ConnectionWatch() : wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  thread_ = std::thread([this] { loop(); });
}

ConnectionWatch::~ConnectionWatch() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake();
  thread_.join();
  ::close(wake_fd_);
}

std::unique_ptr<ConnectionWatch::Registration> ConnectionWatch::watch(int fd, std::function<void()> on_close) {
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    entries_[id] = Entry{fd, std::move(on_close)};
  }
  wake();
  return std::make_unique<Registration>(*this, id);
}

void ConnectionWatch::remove(std::uint64_t id) {
  {
    std::lock_guard lock(mu_);
    entries_.erase(id);
  }
  wake();
}

void ConnectionWatch::wake() {
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void ConnectionWatch::loop() {
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;
  for (;;) {
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    ids.assign(1, 0);
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      for (const auto& [id, e] : entries_) {
        fds.push_back(pollfd{e.fd, POLLRDHUP, 0});
        ids.push_back(id);
      }
    }
    // Blocks until a peer hangs up or the set changes (wake()).
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[0].revents & POLLIN) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
      std::function<void()> on_close;
      {
        std::lock_guard lock(mu_);
        auto it = entries_.find(ids[i]);
        if (it == entries_.end()) continue;  // removed meanwhile: its fd may be another socket now
        on_close = std::move(it->second.on_close);
        entries_.erase(it);
      }
      on_close();
    }
  }
}

}  // namespace baton::http
