// BATON_CLIENT_API marks what libbaton_client exports; everything else in the library (the
// generated protobuf and gRPC code included) stays hidden, so that it cannot clash with an
// application's own symbols.
#pragma once

#if defined(_WIN32)
#define BATON_CLIENT_API
#else
#define BATON_CLIENT_API __attribute__((visibility("default")))
#endif
