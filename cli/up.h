// `baton up`: a whole local cluster — N prefill nodes, M decode nodes and a router — as child
// processes on loopback, for trying Baton on one machine and for end-to-end tests. It waits for
// every node to be ready, prints the router's address, and stops everything on Ctrl-C/SIGTERM.
// A node that fails to start stops the rest; the exit is non-zero with that node's log tail.
#pragma once

namespace baton::cli {

int up_main(int argc, char** argv);

}  // namespace baton::cli
