//go:build kernel

package podlinks_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// TestKernelPeerServiceNeedsAuthorisedToken calls a node's PeerService from
// the node network: without a token, and with a token of a service account
// that may not patch Topology status, it is refused and nothing is made.
func TestKernelPeerServiceNeedsAuthorisedToken(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
	r1 := lab.AddPod(a, "lab", "r1")
	cni(t, r1, "ADD") // r2 is not scheduled: r1's end waits

	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(lab.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "intruder"}}))
	tok, err := lab.Kube.CoreV1().ServiceAccounts("lab").CreateToken(ctx, "intruder", auth.TokenRequest(0), metav1.CreateOptions{})
	must(err)

	req := &meshnetv1.CreateRemoteEndRequest{
		End:   &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r1"}, Interface: "eth1", Uid: 1},
		Peer:  &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r2"}, Interface: "eth1", Uid: 1},
		Vxlan: &meshnetv1.Vxlan{Vni: links.VNI("lab", "r1", "r2", 1), LocalVtep: a.IP.String(), RemoteVtep: b.IP.String()},
	}
	for _, c := range []struct {
		name  string
		token string
		code  codes.Code
	}{{"no token", "", codes.Unauthenticated}, {"bad token", "not-a-token", codes.Unauthenticated}, {"unauthorised token", tok.Status.Token, codes.PermissionDenied}} {
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return b.Dial(ctx, addr) }),
		}
		if c.token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.token)))
		}
		conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", a.IP, labnet.GRPCPort), opts...)
		must(err)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = meshnetv1.NewPeerServiceClient(conn).CreateRemoteEnd(cctx, req)
		cancel()
		conn.Close()
		if status.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	onlyLo(t, r1)
}

// TestKernelPeerServiceTunnelsOnlyToThePeersNode: a daemon's own token
// cannot have another node open a VXLAN end towards an address of its
// choosing: the remote VTEP must be the node of the peer pod, and nothing
// is made otherwise.
func TestKernelPeerServiceTunnelsOnlyToThePeersNode(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
	r1 := lab.AddPod(a, "lab", "r1")
	cni(t, r1, "ADD") // r2 does not exist yet: r1's end waits

	token, err := os.ReadFile(lab.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", a.IP, labnet.GRPCPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(token)))),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return b.Dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	create := func(vtep string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := meshnetv1.NewPeerServiceClient(conn).CreateRemoteEnd(ctx, &meshnetv1.CreateRemoteEndRequest{
			End:   &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r1"}, Interface: "eth1", Uid: 1},
			Peer:  &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r2"}, Interface: "eth1", Uid: 1},
			Vxlan: &meshnetv1.Vxlan{Vni: links.VNI("lab", "r1", "r2", 1), LocalVtep: b.IP.String(), RemoteVtep: vtep},
		})
		return err
	}
	if err := create(b.IP.String()); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "pod r2's node is not known yet") {
		t.Errorf("a far end for a peer pod that does not exist: %v, want FailedPrecondition", err)
	}
	lab.AddPod(b, "lab", "r2") // scheduled on node-b, not wired
	err = create("192.0.2.99")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("vxlan.remote_vtep: 192.0.2.99 is not the address of node node-b (%s), which hosts pod r2", b.IP)) {
		t.Errorf("a far end towards an address of the caller's choosing: %v, want InvalidArgument naming vxlan.remote_vtep", err)
	}
	onlyLo(t, r1)
}

// TestKernelSetRemoteState: a daemon's token may take the far end of a
// VXLAN link down and up again (a cable pull across nodes), and pings stop
// and resume.
func TestKernelSetRemoteState(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""))
	r1, r2 := lab.AddPod(a, "lab", "r1"), lab.AddPod(b, "lab", "r2")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	ping(t, r1, "10.0.1.2")

	tok, err := os.ReadFile(lab.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", b.IP, labnet.GRPCPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(tok)))),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return a.Dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := meshnetv1.NewPeerServiceClient(conn)
	end := &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r2"}, Interface: "eth1", Uid: 1}
	res, err := peer.SetRemoteState(context.Background(), &meshnetv1.SetRemoteStateRequest{End: end, State: meshnetv1.LinkState_LINK_STATE_DOWN})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetLink().GetAdminState() != meshnetv1.LinkState_LINK_STATE_DOWN || !res.GetChanged() {
		t.Fatalf("remote end after down: %v, changed %v", res.GetLink(), res.GetChanged())
	}
	if err := pingN(r1, "10.0.1.2", 1); err == nil {
		t.Error("ping passed with the remote end down")
	}
	if res, err = peer.SetRemoteState(context.Background(), &meshnetv1.SetRemoteStateRequest{End: end, State: meshnetv1.LinkState_LINK_STATE_DOWN}); err != nil || res.GetChanged() {
		t.Fatalf("second down: changed %v, err %v; want an unchanged end", res.GetChanged(), err)
	}
	if res, err = peer.SetRemoteState(context.Background(), &meshnetv1.SetRemoteStateRequest{End: end, State: meshnetv1.LinkState_LINK_STATE_UP}); err != nil || !res.GetChanged() {
		t.Fatalf("up: changed %v, err %v; want a changed end", res.GetChanged(), err)
	}
	ping(t, r1, "10.0.1.2")
}
