// Package deploy holds meshnet's Kubernetes manifests: the kustomize base
// (this directory), its hand-written part (base/), the kind overlay
// (overlays/kind), and the cluster-tier tests that render them with kubectl
// kustomize and apply them to a real API server.
package deploy
