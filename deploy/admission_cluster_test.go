//go:build cluster

package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterHostLinksNeedConsent applies deploy/'s admission policy to a
// real API server and tries, as an editor of namespace tenant, what issue
// reports let an editor reach the node with: a macvlan on the node's NIC
// and a physical peer towards any VTEP and port. Each is refused, naming
// the field and the rule, until a cluster admin consents on the namespace
// (which the editor cannot); then only the NICs, prefixes and ports the
// admin named pass. Links between pods never need consent, and links
// admitted before stay admitted when consent is withdrawn.
func TestClusterHostLinksNeedConsent(t *testing.T) {
	env := clustertest.Start(t)
	kubeconfig := env.Kubeconfig(t)
	kubectl(t, kubeconfig, render(t, "admission").yaml(t), "apply", "--server-side", "-f", "-")
	ctx := context.Background()
	const ns = "tenant"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "eve-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "eve"}},
	}); err != nil {
		t.Fatal(err)
	}
	// The built-in edit role does not reach Topologies; an admin grants it
	// as deploy/README.md shows.
	if err := env.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "topologies"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1beta1.GroupVersion.Group}, Resources: []string{"topologies"}, Verbs: []string{"*"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "eve-topologies"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "topologies"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "eve"}},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "eve"}
	eve, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	pods := v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1"}
	macvlan := v1beta1.Link{UID: 2, PeerPod: v1beta1.PeerHost, LocalIntf: "eth2", PeerIntf: "eth0", LocalIP: "10.251.0.77/24"}
	phy := func(uid int, vtep string, port int32) v1beta1.Link {
		l := v1beta1.Link{UID: uid, PeerPod: "phy1", LocalIntf: fmt.Sprintf("eth%d", uid), PeerIntf: "eth1",
			LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: vtep, VNI: 5001}}
		if port != 0 {
			l.LinkOptions.UDPPort = ptr.To(port)
		}
		return l
	}
	n := 0
	create := func(links ...v1beta1.Link) error {
		n++
		return eve.Create(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r%d", n)},
			Spec: v1beta1.TopologySpec{Links: links}})
	}
	// The policy reads the namespace from the API server's informer, a
	// moment behind an admin's change: wait until a dry run of the probe
	// gets the verdict the change asks for.
	settle := func(what string, probe v1beta1.Link, admit bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := eve.Create(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
				Spec: v1beta1.TopologySpec{Links: []v1beta1.Link{probe}}}, client.DryRunAll)
			if (err == nil) == admit {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the policy's verdict on a probe did not change within 30s: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	refused := func(what string, err error, says ...string) {
		t.Helper()
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want refused by meshnet-host-links", what, err)
			return
		}
		t.Logf("%s: %v", what, err)
		for _, s := range append(says, "meshnet-host-links") {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", what, err, s)
			}
		}
	}

	// The policy takes a moment to reach the API server's admission.
	settle("policy applied", macvlan, false)
	refused("macvlan on eth0 without consent", create(pods, macvlan),
		"spec.links[1]: a link to the node (peer_pod localhost, or link_options) needs namespace tenant labelled meshnet.networkop.co.uk/host-links=allowed")
	refused("physical peer without consent", create(phy(3, "198.51.100.1", 0)), "spec.links[0]: a link to the node")
	if err := create(pods); err != nil {
		t.Errorf("a link between pods: %v, want admitted", err)
	}

	// The editor cannot consent for the namespace.
	err = eve.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"`+v1beta1.HostLinksLabel+`":"allowed"}}}`)))
	if !apierrors.IsForbidden(err) {
		t.Fatalf("eve labelling her namespace: %v, want forbidden", err)
	}

	// A cluster admin consents, naming one NIC, one prefix, the default port.
	var nsObj corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[v1beta1.HostLinksLabel] = v1beta1.HostLinksAllowed
	nsObj.Annotations = map[string]string{v1beta1.HostInterfacesAnnotation: "eth1, ens5", v1beta1.RemoteVTEPsAnnotation: "192.0.2.0/24"}
	if err := env.Client.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	allowedMacvlan := macvlan
	allowedMacvlan.PeerIntf = "ens5"
	settle("consent given", allowedMacvlan, true)
	refused("macvlan on eth0, not among the NICs", create(macvlan),
		"spec.links[0].peer_intf: host interface eth0 is not among those namespace tenant may use (annotation meshnet.networkop.co.uk/host-interfaces: eth1,ens5)")
	refused("VTEP outside the prefixes", create(pods, phy(3, "198.51.100.1", 0)),
		"spec.links[1].link_options.remote_vtep: 198.51.100.1 is outside the prefixes namespace tenant may reach (annotation meshnet.networkop.co.uk/remote-vteps: 192.0.2.0/24)")
	refused("a port not listed", create(phy(3, "192.0.2.7", 8472)),
		"spec.links[0].link_options.udp_port: 8472 is not among the ports namespace tenant may use (annotation meshnet.networkop.co.uk/vxlan-ports: 4789)")
	if err := create(pods, allowedMacvlan, phy(3, "192.0.2.7", 0)); err != nil {
		t.Fatalf("a macvlan on a listed NIC and a physical peer within the prefix: %v, want admitted", err)
	}
	admitted := fmt.Sprintf("r%d", n)

	// Consent withdrawn: what was admitted stays, nothing is added.
	nsObj.Labels[v1beta1.HostLinksLabel] = "no"
	if err := env.Client.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	settle("consent withdrawn", allowedMacvlan, false)
	var topo v1beta1.Topology
	if err := eve.Get(ctx, client.ObjectKey{Namespace: ns, Name: admitted}, &topo); err != nil {
		t.Fatal(err)
	}
	topo.Spec.Links[0].MTU = ptr.To[int32](9000)
	if err := eve.Update(ctx, &topo); err != nil {
		t.Errorf("an edit of a pod link of a Topology admitted with host links, consent withdrawn: %v, want admitted", err)
	}
	if err := eve.Get(ctx, client.ObjectKey{Namespace: ns, Name: admitted}, &topo); err != nil {
		t.Fatal(err)
	}
	topo.Spec.Links[1].PeerIntf = "eth1"
	refused("a host link changed after consent was withdrawn", eve.Update(ctx, &topo), "spec.links[1]: a link to the node")
}
