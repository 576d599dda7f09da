package labctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/pki"
	"github.com/meshnet/meshnet/internal/topofile"
)

// RouterImage is the image of the lab's router pods: the busybox image the
// cluster's registry serves as docker.io's alpine.
const RouterImage = "alpine"

// serveReal runs the lab on real nodes (internal/meshnet-lab/kubecluster): meshnet
// installed from cfg.Overlay with kubectl apply -k, each router a real pod
// of RouterImage with its Topology.
func serveReal(ctx context.Context, cfg Config, f *topofile.File) (err error) {
	for _, l := range f.Links {
		if l.LinkOptions != nil {
			return fmt.Errorf("link %d: physical peers are not stood in on real nodes yet; use the emulated lab (make lab-emulated)", l.UID)
		}
	}
	log := cfg.Log
	start := time.Now()
	c, err := startCluster(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		log.Info("removing the lab")
		err = errors.Join(err, c.Close())
	}()
	topos, err := f.Topologies(cfg.Namespace)
	if err != nil {
		return err
	}
	nics, err := consentToHostLinks(ctx, c.Client, cfg.Namespace, topos)
	if err != nil {
		return err
	}
	if len(nics) > 0 {
		log.Info("the lab's namespace allows macvlans on the nodes' NICs, as a cluster admin would allow them (deploy/admission/host-links.yaml)",
			"namespace", cfg.Namespace, "label", v1beta1.HostLinksLabel+"="+v1beta1.HostLinksAllowed, "interfaces", strings.Join(nics, ","))
	}
	for i := range topos {
		if err := c.Client.Create(ctx, &topos[i]); err != nil {
			return fmt.Errorf("create Topology %s: %w", topos[i].Name, err)
		}
	}
	for _, t := range topos {
		if err := c.Client.Create(ctx, routerPod(cfg.Namespace, t.Name)); err != nil {
			return fmt.Errorf("create pod %s: %w", t.Name, err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err = waitRealReady(wait, c, cfg.Namespace, topos)
	cancel()
	if err != nil {
		return err
	}
	caFile, err := writeCA(ctx, c, cfg.Dir)
	if err != nil {
		return err
	}
	g := realGuide{c: c, f: f, ns: cfg.Namespace, down: downCommand(cfg.Dir), binDir: cfg.BinDir, caFile: caFile, took: time.Since(start)}
	text, err := g.String(ctx)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, guideFile), []byte(text), 0o644); err != nil {
		return err
	}
	log.Info("lab ready", "kubeconfig", c.Kubeconfig, "took", time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	return nil
}

// startCluster starts the real nodes of cfg with meshnet installed from
// cfg.Overlay and cfg.Namespace made; the caller closes it.
func startCluster(ctx context.Context, cfg Config) (*kubecluster.Cluster, error) {
	busybox := cfg.Busybox
	if busybox == "" {
		busybox = "/bin/busybox"
	}
	c, err := kubecluster.New(ctx, kubecluster.Options{
		Dir: cfg.Dir, Prefix: NetnsPrefix, Nodes: cfg.Nodes, MeshnetImage: "meshnet:dev", Overlay: cfg.Overlay, Log: cfg.Log,
		Binaries: kubecluster.Binaries{Assets: cfg.Assets, CNI: cfg.BinDir, Meshnet: cfg.BinDir,
			Pause: filepath.Join(cfg.BinDir, "pause"), Busybox: busybox},
	})
	if err != nil {
		return nil, err
	}
	if err := c.Namespace(ctx, cfg.Namespace); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// consentToHostLinks gives namespace ns, as a cluster admin would, the
// consent its macvlans to the nodes' NICs need (v1beta1.HostLinksLabel and
// the NICs they name), and returns those NICs; nothing when the
// Topologies have none.
func consentToHostLinks(ctx context.Context, c client.Client, ns string, topos []v1beta1.Topology) ([]string, error) {
	var nics []string
	for _, t := range topos {
		for _, l := range t.Spec.Links {
			if l.PeerPod == v1beta1.PeerHost && !slices.Contains(nics, l.PeerIntf) {
				nics = append(nics, l.PeerIntf)
			}
		}
	}
	if len(nics) == 0 {
		return nil, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`,
		v1beta1.HostLinksLabel, v1beta1.HostLinksAllowed, v1beta1.HostInterfacesAnnotation, strings.Join(nics, ","))
	err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, []byte(patch)))
	if err != nil {
		return nil, fmt.Errorf("allow macvlans in namespace %s: %w", ns, err)
	}
	return nics, nil
}

// CAFileName is where a lab on real nodes keeps meshnetd's CA certificate,
// in its directory, for the guide's grpcurl and curl lines and the page.
const CAFileName = "meshnet-ca.crt"

// writeCA writes the CA certificate that meshnet-controller published
// (ConfigMap meshnet/meshnet-ca) into dir, and returns its path; "" when
// the installed meshnet serves plaintext (no certificate published).
func writeCA(ctx context.Context, c *kubecluster.Cluster, dir string) (string, error) {
	var cm corev1.ConfigMap
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: "meshnet", Name: "meshnet-ca"}, &cm)
	if apierrors.IsNotFound(err) || (err == nil && cm.Data[pki.CACertKey] == "") {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read meshnetd's CA: %w", err)
	}
	path := filepath.Join(dir, CAFileName)
	if err := os.WriteFile(path, []byte(cm.Data[pki.CACertKey]), 0o644); err != nil {
		return "", fmt.Errorf("write meshnetd's CA: %w", err)
	}
	return path, nil
}

// routerPod is a router of the lab: a sleeping busybox, as meshnet-cni's
// test pods are.
func routerPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"meshnet.lab/router": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "router", Image: RouterImage, Command: []string{"/bin/sh", "-c", "sleep 2000000000"},
			}},
		},
	}
}

// waitRealReady waits until every router pod runs and every Topology is
// Ready (its links converged in the kernel, as the controller reports).
func waitRealReady(ctx context.Context, c *kubecluster.Cluster, ns string, topos []v1beta1.Topology) error {
	for {
		var notReady []string
		for _, t := range topos {
			var p corev1.Pod
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: t.Name}, &p); err != nil || p.Status.Phase != corev1.PodRunning {
				notReady = append(notReady, "pod "+t.Name)
				continue
			}
			var got v1beta1.Topology
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: t.Name}, &got); err != nil || !lab.Ready(&got) {
				notReady = append(notReady, "Topology "+t.Name)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			out, _ := c.Kubectl(context.Background(), "-n", ns, "get", "pods,topo", "-o", "wide")
			return fmt.Errorf("not ready: %s\n%s", strings.Join(notReady, ", "), out)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// realGuide is what `meshnet-lab up -real` prints.
type realGuide struct {
	c      *kubecluster.Cluster
	f      *topofile.File
	ns     string
	down   string
	binDir string
	// caFile is meshnetd's CA certificate; "" when meshnetd serves
	// plaintext.
	caFile string
	took   time.Duration
}

func (g realGuide) String(ctx context.Context) (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	var pods corev1.PodList
	if err := g.c.Client.List(ctx, &pods, client.InNamespace(g.ns)); err != nil {
		return "", err
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
	}
	w("meshnet lab is up on real nodes in %v: %d pods on %d nodes (kubelet, containerd), namespace %s, API server %s",
		g.took.Round(time.Second), len(pods.Items), len(g.c.Nodes()), g.ns, g.c.ControlPlane.Config.Host)
	for _, n := range g.c.Nodes() {
		w("  %-8s %s  pods %s", n.Name, n.IP, strings.Join(byNode[n.Name], " "))
	}
	var link topofile.Link
	found := false
	for _, l := range g.f.Links {
		if l.IsPod(0) && l.IsPod(1) {
			link, found = l, true
			break
		}
	}
	w("")
	w("Try it:")
	w("  export KUBECONFIG=%s", g.c.Kubeconfig)
	w("  kubectl get pods,topo -n %s -o wide", g.ns)
	w("  kubectl -n meshnet get daemonset,deployment,pods -o wide")
	var hostIP string // of the node of the example link's pod
	if found {
		local, peer := link.Endpoints[0], link.Endpoints[1]
		w("  kubectl exec -n %s %s -- ip addr show %s", g.ns, local.Name, local.Intf)
		if ip := addr(peer.IP); ip != "" {
			w("  kubectl exec -n %s %s -- ping -c 3 %s", g.ns, local.Name, ip)
		}
		w("  kubectl edit topo -n %s %s                 # on link %s add:  state: down", g.ns, local.Name, local.Intf)
		w("  kubectl get topo -n %s %s -o yaml          # status: what the kernel has", g.ns, local.Name)
		for _, p := range pods.Items {
			if p.Name == local.Name {
				hostIP = p.Status.HostIP
			}
		}
		// Straight at the node first: a runtime change lasts while the
		// Topology says nothing of the link's state, which kubectl
		// meshnet up/down below then does.
		api := nodeAPI{binDir: g.binDir, caFile: g.caFile, hostIP: hostIP}
		api.lines(w, "SetLinkState", fmt.Sprintf(`{"namespace":"%s","pod":"%s","interface":"%s","state":"LINK_STATE_DOWN"}`, g.ns, local.Name, local.Intf),
			"a runtime change, in the kernel only: it lasts, as the Topology says nothing of the link's state",
			fmt.Sprintf("/v1/namespaces/%s/pods/%s/links", g.ns, local.Name), "reads need a token too")
		plugin := kubectlMeshnet(w, g.binDir, g.ns, local.Name, local.Intf)
		if plugin {
			w("  kubectl meshnet capture %s %s -n %s -c 4 --duration 3s -w - | tshark -r -   # its traffic, live, through the API server; or | wireshark -k -i -",
				local.Name, local.Intf, g.ns)
		} else {
			w(`  curl -sN %s-H "authorization: Bearer $TOKEN" "%s://%s:%d/v1/namespaces/%s/pods/%s/links/%s/capture?max_packets=4&duration=3s" | tshark -r -`,
				api.curlTLS(), api.scheme(), hostIP, lab.HTTPPort, g.ns, local.Name, local.Intf)
		}
	}
	w("  kubectl -n meshnet rollout restart daemonset/meshnetd   # links and their state survive")
	if hostIP != "" {
		scheme := "http"
		if g.caFile != "" {
			scheme = "https"
		}
		w("%s", pageLine(scheme, hostIP, g.ns))
		w("Paste a token into the page's token field: kubectl -n meshnet create token meshnet-operator --audience meshnetd (any token that may list the namespace's Topologies).")
		if g.caFile != "" {
			w("The page's certificate is signed by meshnet's own CA, %s: import it into your browser, or accept its warning.", g.caFile)
		}
	}
	w("Remove it: %s", g.down)
	return b.String(), nil
}

// nodeAPI is how the guides reach a node's meshnetd straight, as the
// README shows: grpcurl and curl with meshnetd's CA (none when it serves
// plaintext) and a token of meshnet-operator's.
type nodeAPI struct {
	binDir, caFile, hostIP string
}

func (a nodeAPI) scheme() string {
	if a.caFile != "" {
		return "https"
	}
	return "http"
}

func (a nodeAPI) curlTLS() string {
	if a.caFile != "" {
		return "--cacert $CA "
	}
	return ""
}

// lines writes the CA and token lines, then a grpcurl call of method with
// body and a curl GET of path, each with its comment.
func (a nodeAPI) lines(w func(string, ...any), method, body, grpcComment, path, curlComment string) {
	grpcurl := "grpcurl"
	if _, err := os.Stat(filepath.Join(a.binDir, "grpcurl")); err == nil {
		grpcurl = filepath.Join(a.binDir, "grpcurl")
	}
	grpcTLS := "-plaintext"
	if a.caFile != "" {
		// meshnetd serves TLS: the CA is the one meshnet-controller
		// published (kubectl -n meshnet get configmap meshnet-ca).
		w("  CA=%s   # meshnetd's CA: kubectl -n meshnet get configmap meshnet-ca -o jsonpath='{.data.ca\\.crt}'", a.caFile)
		grpcTLS = "-cacert $CA"
	}
	w("  TOKEN=$(kubectl -n meshnet create token meshnet-operator --audience meshnetd)")
	w(`  %s %s -H "authorization: Bearer $TOKEN" -d '%s' %s:%d meshnet.v1.LinkService/%s%s`, grpcurl, grpcTLS, body, a.hostIP, lab.GRPCPort, method, comment(grpcComment))
	w(`  curl -s %s-H "authorization: Bearer $TOKEN" %s://%s:%d%s%s`, a.curlTLS(), a.scheme(), a.hostIP, lab.HTTPPort, path, comment(curlComment))
}

func comment(c string) string {
	if c == "" {
		return ""
	}
	return "   # " + c
}
