// Package meshnetv1 is meshnet's gRPC API (package meshnet.v1) and its
// grpc-gateway REST mapping: CNIService (meshnet-cni to meshnetd), PeerService
// (meshnetd to meshnetd), LinkService (runtime link control) and DataService
// (read-only data for Grafana).
//
// Everything but this file, limits.go and the tests is generated from the .proto files
// beside it by hack/gen-proto.sh; edit the protos, not the Go.
package meshnetv1
