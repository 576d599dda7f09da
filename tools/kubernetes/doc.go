// Package kubernetes pins the upstream Kubernetes components that meshnet's
// tests and labs run (kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kube-proxy), one main each in a folder of its
// own, all built from the module proxy at the single k8s.io/kubernetes
// version in this go.mod (hack/controlplane.sh, hack/nodes.sh).
package kubernetes
