package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/auth"
)

// daemonRules are what PeerService requires of the meshnetd calling it, and
// what the controller's calls to meshnetd need: patch on topologies.
var daemonRules = []rbacv1.PolicyRule{{
	APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies", "topologies/status"},
	Verbs: []string{"get", "list", "watch", "patch", "update"},
}}

// Namespace creates a Kubernetes namespace and its default service account
// (no controller-manager makes it in the lab), if missing.
func (l *Lab) Namespace(name string) error {
	ctx := context.Background()
	if err := ignoreExists(l.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}}
	if err := ignoreExists(l.Client.Create(ctx, sa)); err != nil {
		return fmt.Errorf("create service account %s/default: %w", name, err)
	}
	return nil
}

// serviceAccountToken makes a service account in SystemNamespace bound to
// a cluster role of rules and writes a day-long token for it to path.
func (l *Lab) serviceAccountToken(name string, rules []rbacv1.PolicyRule, path string) error {
	ctx := context.Background()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: SystemNamespace, Name: name}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lab-" + name}, Rules: rules},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "lab-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lab-" + name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: SystemNamespace, Name: name}},
		},
	}
	for _, o := range objs {
		if err := ignoreExists(l.Client.Create(ctx, o)); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	tok, err := l.Kube.CoreV1().ServiceAccounts(SystemNamespace).CreateToken(ctx, name, auth.TokenRequest(24*time.Hour), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", SystemNamespace, name, err)
	}
	return os.WriteFile(path, []byte(tok.Status.Token), 0o600)
}

// OperatorToken writes the token of a service account allowed what an
// operator does with grpcurl or curl (patch topologies) to the lab's
// directory and returns its path.
func (l *Lab) OperatorToken() (string, error) {
	path := filepath.Join(l.opts.Dir, "operator.token")
	return path, l.serviceAccountToken("operator", daemonRules, path)
}

// writeKubeconfig writes an admin kubeconfig reaching the API server at
// server (where it listens, when empty) into the lab's directory.
func (l *Lab) writeKubeconfig(name, server string) (string, error) {
	data, err := l.ControlPlane.AdminKubeconfig(server)
	if err != nil {
		return "", err
	}
	path := filepath.Join(l.opts.Dir, name)
	return path, os.WriteFile(path, data, 0o600)
}

// Kubeconfig writes the kubeconfig a user on the host runs kubectl with.
func (l *Lab) Kubeconfig() (string, error) { return l.writeKubeconfig("kubeconfig", "") }

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
