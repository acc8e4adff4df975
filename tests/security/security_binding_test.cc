// Every listener binds only the address it is given: a decode and a prefill node started with
// --host 127.0.0.1 (KV over UCX) listen on loopback only, UCX's own TCP listeners included, though
// this machine has other interfaces. Read from the kernel's socket tables (/proc/net/tcp{,6})
// for the sockets the process holds.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

// The socket inodes the process holds.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char target[256];
    const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<std::size_t>(n));
    if (t.rfind("socket:[", 0) == 0) out.insert(t.substr(8, t.size() - 9));
  }
  ::closedir(d);
  return out;
}

// The local addresses (hex, as the kernel writes them) of the process's listening TCP sockets.
std::vector<std::string> listening_addresses(pid_t pid) {
  const std::set<std::string> inodes = socket_inodes(pid);
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state == "0A" && inodes.contains(inode)) out.push_back(local.substr(0, local.find(':')));
    }
  }
  return out;
}

bool loopback(const std::string& hex) {
  return hex == "0100007F" ||                                 // 127.0.0.1
         hex == "00000000000000000000000001000000" ||         // ::1
         hex == "0000000000000000FFFF00000100007F";            // ::ffff:127.0.0.1
}

// An IPv4 route through a device other than loopback.
bool machine_has_another_interface() {
  std::ifstream v4("/proc/net/route");
  std::string line;
  std::getline(v4, line);
  while (std::getline(v4, line)) {
    if (line.rfind("lo", 0) != 0) return true;
  }
  return false;
}

TEST(Binding, NodesOnLoopbackListenOnLoopbackOnlyUcxIncluded) {
  if (!machine_has_another_interface()) GTEST_SKIP() << "this machine has no interface but loopback";
  for (const char* name : {"baton-decode", "baton-prefill"}) {
    SCOPED_TRACE(name);
    auto node = start_process({binary(name), "--insecure", "--model", family_path("target"), "--host", "127.0.0.1",
                               "--port", "0", "--threads", "1", "--kv-cache-memory", "0.125", "--transport", "ucx"});
    (void)ready_address(*node);
    const std::vector<std::string> listening = listening_addresses(node->pid());
    EXPECT_FALSE(listening.empty());
    for (const std::string& a : listening) EXPECT_TRUE(loopback(a)) << "listens on " << a;
    EXPECT_TRUE(node->wait_for_line("UCX: network device lo only", std::chrono::seconds(1)).ok());
  }
}

}  // namespace
}  // namespace baton::testing
