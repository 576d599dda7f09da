//go:build cluster

package auth

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterDecisionsHoldForTheTTL revokes a permission: a checker that
// allowed it keeps allowing it until its TTL ends, while a fresh checker is
// refused at once.
func TestClusterDecisionsHoldForTheTTL(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := serviceAccountToken(t, cs, "lab", "editor")
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "editor", Namespace: "lab"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := Access{Verb: "patch", Group: "networkop.co.uk", Resource: "topologies"}
	const ttl = 3 * time.Second
	cached := NewChecker(cs, ttl)
	user, err := cached.Authenticate(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if err := cached.Authorize(ctx, user, patch, "lab"); err != nil {
		t.Fatalf("allowed by cluster-admin: %v", err)
	}
	revoked := time.Now()
	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, "editor", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for status.Code(NewChecker(cs, ttl).Authorize(ctx, user, patch, "lab")) != codes.PermissionDenied {
		if time.Since(revoked) > ttl/2 {
			t.Fatal("the API server still allows the call after the binding was deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cached.Authorize(ctx, user, patch, "lab"); err != nil {
		t.Fatalf("within the TTL the cached decision should hold: %v", err)
	}
	time.Sleep(time.Until(revoked.Add(ttl + 100*time.Millisecond)))
	if err := cached.Authorize(ctx, user, patch, "lab"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after the TTL: %v, want PermissionDenied", err)
	}
}
