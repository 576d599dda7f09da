package podlinkstest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// Tokens are service-account tokens of a real API server and a Checker
// against it.
type Tokens struct {
	Checker *auth.Checker
	// Editor may read and patch topologies in the namespace, as the
	// built-in edit role does; Viewer may only read them (get, list,
	// watch), as the view role does.
	Editor, Viewer string
}

// Cluster starts a kube-apiserver and etcd (internal/meshnet-lab/controlplane/clustertest) and makes
// the namespace with an editor and a viewer service account.
func Cluster(t testing.TB, namespace string) Tokens {
	t.Helper()
	env := clustertest.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "topology-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies"}, Verbs: []string{"get", "list", "watch", "patch"}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "topology-editor"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "editor", Namespace: namespace}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "topology-viewer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "topology-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: namespace}},
	}, metav1.CreateOptions{})
	must(err)
	token := func(name string) string {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must(err)
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, auth.TokenRequest(0), metav1.CreateOptions{})
		must(err)
		return tr.Status.Token
	}
	return Tokens{Checker: auth.NewChecker(cs, time.Minute), Editor: token("editor"), Viewer: token("viewer")}
}
