#include "router/http/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace baton::router::http {
namespace {

// Address and port of a socket address (IPv4, IPv6 or IPv4-mapped IPv6), as httplib prints them.
bool address_of(const sockaddr_storage& a, std::string* host, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    *port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *host = buf;
  return true;
}

}  // namespace

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

int ConnectionWatch::find_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* d = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(d->d_name, &end, 10);
    if (end == d->d_name || *end != '\0') continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    std::string host;
    int port = 0;
    if (!address_of(local, &host, &port) || port != local_port) continue;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (!address_of(peer, &host, &port) || port != remote_port) continue;
    if (host == remote_addr || host == "::ffff:" + remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace baton::router::http
