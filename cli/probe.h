// `baton probe`: the health probe of a Baton process serving TLS, for Kubernetes exec probes
// (the kubelet's native gRPC probe speaks plain text only). Calls grpc.health.v1 Check on
// --address over the cluster's mutual TLS (the pod's own certificate; the peer is checked against
// the cluster CA, not by host name) or plain text without --tls-cert; exit 0 when SERVING, 1
// otherwise, with the reason on stderr.
#pragma once

namespace baton::cli {

int probe_main(int argc, char** argv);

}  // namespace baton::cli
