//go:build cluster

package auth

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterInterceptorChecksTokensAndRBAC serves the health service behind
// the interceptor: Check needs patch on topologies in namespace lab, List is
// open, Watch is not in the policy. Tokens are bound to Audience: the
// editor's token for the API server is refused, and the API server refuses
// the editor's token for meshnetd.
func TestClusterInterceptorChecksTokensAndRBAC(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)

	for _, name := range []string{"lab"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	editor := serviceAccountToken(t, cs, "lab", "editor")
	viewer := serviceAccountToken(t, cs, "lab", "viewer")
	apiToken, err := cs.CoreV1().ServiceAccounts("lab").CreateToken(ctx, "editor", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles("lab").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "topology-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies"}, Verbs: []string{"patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("lab").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "topology-editor"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "editor", Namespace: "lab"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	policy := Policy{
		healthpb.Health_Check_FullMethodName: {Verb: "patch", Group: "networkop.co.uk", Resource: "topologies", Namespace: func(any) string { return "lab" }},
		healthpb.Health_List_FullMethodName:  {},
	}
	checker := NewChecker(cs, time.Minute)
	srv := grpc.NewServer(grpc.UnaryInterceptor(UnaryInterceptor(checker, policy)), grpc.StreamInterceptor(StreamInterceptor(checker, policy)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	call := func(token string, method func(healthpb.HealthClient) error) codes.Code {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if token != "" {
			path := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			opts = append(opts, grpc.WithPerRPCCredentials(TokenFile{Path: path, Insecure: true}))
		}
		conn, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return status.Code(method(healthpb.NewHealthClient(conn)))
	}
	check := func(c healthpb.HealthClient) error {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	watch := func(c healthpb.HealthClient) error {
		w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = w.Recv()
		return err
	}
	list := func(c healthpb.HealthClient) error { _, err := c.List(ctx, &healthpb.HealthListRequest{}); return err }

	for _, tc := range []struct {
		name   string
		token  string
		method func(healthpb.HealthClient) error
		want   codes.Code
	}{
		{"allowed by RBAC", editor, check, codes.OK},
		{"authenticated but not allowed", viewer, check, codes.PermissionDenied},
		{"no token", "", check, codes.Unauthenticated},
		{"forged token", "not-a-token", check, codes.Unauthenticated},
		{"open method without a token", "", list, codes.OK},
		{"method missing from the policy", editor, watch, codes.PermissionDenied},
		{"the editor's token for the API server", apiToken.Status.Token, check, codes.Unauthenticated},
	} {
		if got := call(tc.token, tc.method); got != tc.want {
			t.Errorf("%s: code %v, want %v", tc.name, got, tc.want)
		}
	}

	asEditor := rest.AnonymousClientConfig(env.Config)
	asEditor.BearerToken = editor
	_, err = kubernetes.NewForConfigOrDie(asEditor).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("the API server, given the editor's token for meshnetd: %v, want 401 Unauthorized", err)
	}
}

func serviceAccountToken(t *testing.T, cs kubernetes.Interface, namespace, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, TokenRequest(0), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}
