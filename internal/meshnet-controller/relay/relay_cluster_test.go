//go:build cluster

package relay

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/relayapi"
)

// TestClusterRelay serves the relay with a real API server behind it: the
// front proxy's settings read from the API server's ConfigMap, users'
// rights decided by SubjectAccessReview against real RBAC, pods read from
// the API server. The meshnetd it relays to is a stand-in that streams two
// pieces, or refuses eth9: the daemon's own capture is proven in the
// kernel tier, and the whole path through kube-apiserver on real nodes in
// deploy's node test.
func TestClusterRelay(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	proxyCA, err := controlplane.NewFrontProxyCA()
	if err != nil {
		t.Fatal(err)
	}
	publishFrontProxy(t, kube, proxyCA)

	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "r1"},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "alpine"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "pending"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "alpine"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "orphan"},
			Spec: corev1.PodSpec{NodeName: "node-9", Containers: []corev1.Container{{Name: "c", Image: "alpine"}}}},
		// editor may patch the namespace's Topologies, viewer may read them.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "topologies"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies"}, Verbs: []string{"get", "patch"}}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "view"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "editor"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "topologies"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "editor"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "viewer"}}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	var (
		daemonCalls atomic.Int32
		lastChange  atomic.Pointer[change]
	)
	daemon := startDaemon(t, &daemonCalls, &lastChange)
	srv, err := New(Config{Kube: kube, Checker: auth.NewChecker(kube, time.Second), Pods: env.Client,
		Daemons: daemons{"node-1": daemon}, Pool: daemonclient.NewPool(nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	// Start's own listener is not used: the test serves the handler with
	// httptest's, asking for client certificates as Start does.
	srv.follow(runCtx)
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	ts.StartTLS()
	t.Cleanup(ts.Close)

	proxy := clientFor(t, ts, proxyCA, "front-proxy-client")
	other, err := controlplane.NewFrontProxyCA()
	if err != nil {
		t.Fatal(err)
	}
	do := func(c *http.Client, method, user, path, body string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(cmp.Or(method, http.MethodGet), ts.URL+path, strings.NewReader(body))
		if user != "" {
			req.Header.Set("X-Remote-User", user)
			req.Header.Set("X-Remote-Group", "system:authenticated")
		}
		// The API server keeps the user's credentials to itself; were one
		// to come this far, it must go no further.
		req.Header.Set("Authorization", "Bearer forged")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out), res.Header
	}
	capture := func(c *http.Client, user, path string) (int, string, http.Header) {
		t.Helper()
		return do(c, http.MethodGet, user, path, "")
	}
	r1 := relayapi.CapturePath("lab", "r1", "eth1") + "?max_packets=2"

	t.Run("Discovery", func(t *testing.T) {
		code, body, _ := capture(ts.Client(), "", relayapi.GroupVersionPath)
		var list metav1.APIResourceList
		if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list.APIResources) != 2 ||
			list.APIResources[0].Name != "pods/proxy" || list.APIResources[1].Name != "links" || list.GroupVersion != relayapi.Group+"/"+relayapi.Version {
			t.Errorf("GET %s: %d %s; want the APIResourceList of pods/proxy and links", relayapi.GroupVersionPath, code, body)
		}
	})
	t.Run("EditorGetsTheStream", func(t *testing.T) {
		// timeout is client-go's, for the API server (kubectl
		// --request-timeout): passed over.
		code, body, h := capture(proxy, "editor", r1+"&timeout=30s")
		if code != http.StatusOK || body != "piece 1;piece 2;" || h.Get("Content-Type") != "application/x-pcapng" {
			t.Errorf("capture as editor: %d %q (%s); want 200 and the daemon's two pieces as application/x-pcapng", code, body, h.Get("Content-Type"))
		}
	})
	state := relayapi.ProxyPath("lab", "r1", "links/eth1/state")
	t.Run("EditorChangesAtRuntime", func(t *testing.T) {
		// The path the API server authorized names the pod, whatever
		// the body says.
		code, body, _ := do(proxy, http.MethodPut, "editor", state, `{"namespace":"other","pod":"r9","state":"LINK_STATE_DOWN"}`)
		var got meshnetv1.SetLinkStateResponse
		if err := protojson.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got.GetLink().GetAdminState() != meshnetv1.LinkState_LINK_STATE_DOWN {
			t.Errorf("PUT %s as editor: %d %s (%v); want 200 and eth1 read back down", state, code, body, err)
		}
		req := lastChange.Load()
		if req == nil || req.req.GetNamespace() != "lab" || req.req.GetPod() != "r1" || req.req.GetInterface() != "eth1" {
			t.Fatalf("the daemon was asked %v, want r1's eth1 in lab", req)
		}
		if req.auth != nil {
			t.Errorf("the daemon got authorization %q from the user's request, want only the relay's own", req.auth)
		}
		code, body, _ = do(proxy, http.MethodDelete, "editor", relayapi.ProxyPath("lab", "r1", "links/eth1/netem"), "")
		if code != http.StatusOK {
			t.Errorf("DELETE netem as editor: %d %s; want 200", code, body)
		}
	})
	// Each refusal is a Status naming what is wrong, and reaches no daemon.
	refusals := []refusal{
		{"NoClientCertificate", ts.Client(), "editor", r1, http.StatusUnauthorized, "front proxy", "", ""},
		{"CertificateOfAnotherCA", clientFor(t, ts, other, "front-proxy-client"), "editor", r1, http.StatusUnauthorized, "front proxy", "", ""},
		{"NameNotAllowed", clientFor(t, ts, proxyCA, "mallory"), "editor", r1, http.StatusUnauthorized, "front proxy", "", ""},
		{"ViewerMayNotCapture", proxy, "viewer", r1, http.StatusForbidden, `viewer may not patch topologies.networkop.co.uk in namespace "lab"`, "", ""},
		{"UnknownParameter", proxy, "editor", r1 + "&count=3", http.StatusBadRequest, "count: unknown query parameter", "", ""},
		{"BadDuration", proxy, "editor", r1 + "&duration=5parsecs", http.StatusBadRequest, `duration: "5parsecs" is not a duration`, "", ""},
		{"UnknownPod", proxy, "editor", relayapi.CapturePath("lab", "r9", "eth1"), http.StatusNotFound, `pods "r9" not found`, "", ""},
		{"PodOnNoNode", proxy, "editor", relayapi.CapturePath("lab", "pending", "eth1"), http.StatusConflict, "on no node yet", "", ""},
		{"NodeWithoutDaemon", proxy, "editor", relayapi.CapturePath("lab", "orphan", "eth1"), http.StatusServiceUnavailable, "meshnetd of node node-9", "", ""},
		{"DaemonRefusesTheLink", proxy, "editor", relayapi.CapturePath("lab", "r1", "eth9"), http.StatusNotFound, "eth9", "", ""},
		// The daemon refusing the controller's own token is not the
		// user's fault: not a 401/403 that would tell them to log in.
		{"DaemonRefusesTheController", proxy, "editor", relayapi.CapturePath("lab", "r1", "eth7"), http.StatusInternalServerError,
			"meshnetd refused meshnet-controller's own credentials", "", ""},
	}
	t.Run("ViewerReadsCounters", func(t *testing.T) {
		code, body, _ := capture(proxy, "viewer", relayapi.LinksPath("lab")+"?pod=r1")
		var got meshnetv1.ListLinksResponse
		if err := protojson.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || len(got.GetLinks()) != 1 ||
			got.GetLinks()[0].GetCounters().GetRxPackets() != 10 {
			t.Errorf("links of r1 as viewer: %d %s (%v); want 200 and r1's eth1 with 10 packets received", code, body, err)
		}
	})
	t.Run("ViewerWatchesEvents", func(t *testing.T) {
		// The stand-in sends r1's eth1, SYNCED, then eth1's carrier lost,
		// and holds the stream; orphan's node has no meshnetd, which the
		// relay passes over (it scans again later).
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(wctx, http.MethodGet, ts.URL+relayapi.LinksPath("lab")+"?watch=true", nil)
		req.Header.Set("X-Remote-User", "viewer")
		req.Header.Set("X-Remote-Group", "system:authenticated")
		res, err := proxy.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(res.Body)
			t.Fatalf("watch as viewer: %d %s", res.StatusCode, body)
		}
		lines := bufio.NewScanner(res.Body)
		var got []string
		for len(got) < 3 && lines.Scan() {
			var ev meshnetv1.WatchLinksResponse
			if err := protojson.Unmarshal(lines.Bytes(), &ev); err != nil {
				t.Fatalf("line %q: %v", lines.Text(), err)
			}
			got = append(got, fmt.Sprintf("%s %s %t", ev.GetType(), ev.GetLink().GetInterface(), ev.GetLink().GetCarrier()))
		}
		want := []string{"LINK_EVENT_TYPE_ADDED eth1 true", "LINK_EVENT_TYPE_SYNCED  false", "LINK_EVENT_TYPE_MODIFIED eth1 false"}
		if !slices.Equal(got, want) {
			t.Errorf("events %q, want %q, each as it happened", got, want)
		}
	})
	refusals = append(refusals, []refusal{
		{"WatchOfUnknownPod", proxy, "viewer", relayapi.LinksPath("lab") + "?watch=true&pod=r9", http.StatusNotFound, `pods "r9" not found`, "", ""},
		{"WatchOfNobody", proxy, "nobody", relayapi.LinksPath("lab") + "?watch=true", http.StatusForbidden, `nobody may not list topologies.networkop.co.uk in namespace "lab"`, "", ""},
		{"LinksWithoutClientCertificate", ts.Client(), "viewer", relayapi.LinksPath("lab"), http.StatusUnauthorized, "front proxy", "", ""},
		{"LinksOfNobody", proxy, "nobody", relayapi.LinksPath("lab"), http.StatusForbidden, `nobody may not list topologies.networkop.co.uk in namespace "lab"`, "", ""},
		{"LinksOfUnknownPod", proxy, "viewer", relayapi.LinksPath("lab") + "?pod=r9", http.StatusNotFound, `pods "r9" not found`, "", ""},
		{"LinksUnknownParameter", proxy, "viewer", relayapi.LinksPath("lab") + "?node=node-1", http.StatusBadRequest, "node: unknown query parameter (known: pod, watch)", "", ""},
		// orphan's node has no meshnetd: the namespace's read names it.
		{"LinksOfANodeWithoutDaemon", proxy, "viewer", relayapi.LinksPath("lab"), http.StatusServiceUnavailable, "node-9", "", ""},
	}...)
	refusals = append(refusals, []refusal{
		{name: "ViewerMayNotChange", client: proxy, user: "viewer", path: state, method: http.MethodPut, body: `{"state":"LINK_STATE_DOWN"}`,
			code: http.StatusForbidden, contains: `viewer may not patch topologies.networkop.co.uk in namespace "lab"`},
		{name: "ChangeWithUnknownField", client: proxy, user: "editor", path: state, method: http.MethodPut, body: `{"state":"LINK_STATE_DOWN","speed":1}`,
			code: http.StatusBadRequest, contains: "speed"},
		{name: "ChangeNotRelayed", client: proxy, user: "editor", path: relayapi.ProxyPath("lab", "r1", "links/eth1/mtu"), method: http.MethodPut, body: `{}`,
			code: http.StatusNotFound, contains: "not a change meshnet relays"},
		{name: "ChangeWithParameter", client: proxy, user: "editor", path: state + "?dryRun=All", method: http.MethodPut, body: `{"state":"LINK_STATE_DOWN"}`,
			code: http.StatusBadRequest, contains: "dryRun: unknown query parameter"},
		{name: "ChangeOfPodOnNoNode", client: proxy, user: "editor", path: relayapi.ProxyPath("lab", "pending", "links/eth1/state"), method: http.MethodPut,
			body: `{"state":"LINK_STATE_DOWN"}`, code: http.StatusConflict, contains: "on no node yet"},
		{name: "ChangeTooLarge", client: proxy, user: "editor", path: relayapi.ProxyPath("lab", "r1", "routes"), method: http.MethodPut,
			body: `{"routes":[` + strings.Repeat(`{"dst":"192.0.2.0/24","gw":"10.0.0.2"},`, 2000) + `{"dst":"192.0.2.0/24"}]}`,
			code: http.StatusBadRequest, contains: "too large"},
		// A user who may not change the links has nothing of theirs read.
		{name: "ViewerMayNotSendMuch", client: proxy, user: "viewer", path: state, method: http.MethodPut, body: strings.Repeat(" ", 1<<20),
			code: http.StatusForbidden, contains: "viewer may not patch"},
		{name: "ChangeWithoutClientCertificate", client: ts.Client(), user: "editor", path: state, method: http.MethodPut, body: `{"state":"LINK_STATE_DOWN"}`,
			code: http.StatusUnauthorized, contains: "front proxy"},
	}...)
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			before := daemonCalls.Load()
			code, body, _ := do(tc.client, tc.method, tc.user, tc.path, tc.body)
			// Only what a daemon itself refuses, or what reads the daemons
			// of other nodes too, reaches it.
			reaches := tc.name == "DaemonRefusesTheLink" || tc.name == "DaemonRefusesTheController" || tc.name == "LinksOfANodeWithoutDaemon"
			if called := daemonCalls.Load() - before; called != 0 && !reaches {
				t.Errorf("%s %s as %s reached the daemon %d times, want none", cmp.Or(tc.method, "GET"), tc.path, tc.user, called)
			}
			var st metav1.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil || code != tc.code || st.Kind != "Status" || int(st.Code) != tc.code ||
				!strings.Contains(st.Message, tc.contains) {
				t.Errorf("%s %s as %s: %d %s; want a Status %d containing %q", cmp.Or(tc.method, "GET"), tc.path, tc.user, code, body, tc.code, tc.contains)
			}
		})
	}
}

// refusal is a request the relay refuses: with code, and a Status whose
// message contains contains.
type refusal struct {
	name     string
	client   *http.Client
	user     string
	path     string
	code     int
	contains string
	// method is GET when empty; body is the request's.
	method, body string
}

// publishFrontProxy writes the front proxy's settings into the ConfigMap
// the API server publishes them in, as kube-apiserver's
// --requestheader-* flags do (envtest's API server has none).
func publishFrontProxy(t *testing.T, kube kubernetes.Interface, ca *controlplane.FrontProxyCA) {
	t.Helper()
	cms := kube.CoreV1().ConfigMaps(authConfigMapNamespace)
	cm, err := cms.Get(context.Background(), authConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	for k, v := range map[string]string{
		"requestheader-client-ca-file":       string(ca.PEM),
		"requestheader-allowed-names":        `["front-proxy-client"]`,
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-uid-headers":          `[]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
	} {
		cm.Data[k] = v
	}
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clientFor is an HTTPS client of ts presenting a client certificate for
// cn signed by ca.
func clientFor(t *testing.T, ts *httptest.Server, ca *controlplane.FrontProxyCA, cn string) *http.Client {
	t.Helper()
	certPEM, keyPEM, err := ca.ClientCert(cn)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
}

// daemons finds the stand-in daemon of each node.
type daemons map[string]string

func (d daemons) DaemonFor(_ context.Context, node string) (string, error) {
	if addr, ok := d[node]; ok {
		return addr, nil
	}
	return "", fmt.Errorf("no meshnetd endpoint on node %s", node)
}

// captureDaemon stands in for meshnetd's CaptureLink and ListLinks, and
// counts the calls that reach it. It captures eth1, refuses the caller on
// eth7, and has no other link.
type captureDaemon struct {
	meshnetv1.UnimplementedLinkServiceServer
	calls *atomic.Int32
	// last is the last SetLinkState that reached it.
	last *atomic.Pointer[change]
}

func (d captureDaemon) ListLinks(_ context.Context, req *meshnetv1.ListLinksRequest) (*meshnetv1.ListLinksResponse, error) {
	d.calls.Add(1)
	return &meshnetv1.ListLinksResponse{Links: []*meshnetv1.LinkStatus{{
		Pod: &meshnetv1.PodRef{Namespace: req.GetNamespace(), Name: "r1"}, Interface: "eth1",
		Counters: &meshnetv1.LinkCounters{RxPackets: 10},
	}}}, nil
}

func (d captureDaemon) CaptureLink(req *meshnetv1.CaptureLinkRequest, s grpc.ServerStreamingServer[meshnetv1.CaptureLinkResponse]) error {
	d.calls.Add(1)
	if req.GetInterface() == "eth7" {
		return status.Error(codes.PermissionDenied, "system:serviceaccount:meshnet:meshnet-controller may not patch topologies")
	}
	if req.GetInterface() != "eth1" {
		return status.Errorf(codes.NotFound, "interface %s: pod %s has no link on it", req.GetInterface(), req.GetPod())
	}
	for i := range 2 {
		if err := s.Send(&meshnetv1.CaptureLinkResponse{Data: fmt.Appendf(nil, "piece %d;", i+1)}); err != nil {
			return err
		}
	}
	return nil
}

// change is a SetLinkState that reached the stand-in, with the
// authorization metadata it came with.
type change struct {
	req  *meshnetv1.SetLinkStateRequest
	auth []string
}

func (d captureDaemon) SetLinkState(ctx context.Context, req *meshnetv1.SetLinkStateRequest) (*meshnetv1.SetLinkStateResponse, error) {
	d.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	d.last.Store(&change{req: req, auth: md.Get("authorization")})
	return &meshnetv1.SetLinkStateResponse{Link: &meshnetv1.LinkStatus{Pod: &meshnetv1.PodRef{Namespace: req.GetNamespace(), Name: req.GetPod()},
		Interface: req.GetInterface(), AdminState: req.GetState()}}, nil
}

func (d captureDaemon) ClearNetem(_ context.Context, req *meshnetv1.ClearNetemRequest) (*meshnetv1.ClearNetemResponse, error) {
	d.calls.Add(1)
	return &meshnetv1.ClearNetemResponse{Link: &meshnetv1.LinkStatus{Pod: &meshnetv1.PodRef{Namespace: req.GetNamespace(), Name: req.GetPod()},
		Interface: req.GetInterface()}}, nil
}

func (d captureDaemon) WatchLinks(req *meshnetv1.WatchLinksRequest, s grpc.ServerStreamingServer[meshnetv1.WatchLinksResponse]) error {
	d.calls.Add(1)
	r1 := &meshnetv1.PodRef{Namespace: req.GetNamespace(), Name: "r1"}
	for _, ev := range []*meshnetv1.WatchLinksResponse{
		{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, Pod: r1, Link: &meshnetv1.LinkStatus{Pod: r1, Interface: "eth1", Carrier: true}},
		{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED},
		{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED, Pod: r1, Link: &meshnetv1.LinkStatus{Pod: r1, Interface: "eth1", Carrier: false}},
	} {
		if err := s.Send(ev); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func startDaemon(t *testing.T, calls *atomic.Int32, last *atomic.Pointer[change]) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	meshnetv1.RegisterLinkServiceServer(g, captureDaemon{calls: calls, last: last})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}
