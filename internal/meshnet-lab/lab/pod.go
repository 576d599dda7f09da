package lab

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/cniconf"
)

// Pod is an emulated pod: a network namespace and a Pod object.
type Pod struct {
	lab         *Lab
	Namespace   string
	Name        string
	Node        *Node
	Netns       string
	ContainerID string
}

// AddPod makes a pod sandbox on node: its network namespace, and a Pod
// object with spec.nodeName and status.hostIP set as the kubelet would. It
// does not wire it: that is CNI ADD.
func (l *Lab) AddPod(node *Node, namespace, name string) (*Pod, error) {
	p := &Pod{lab: l, Namespace: namespace, Name: name, Node: node, ContainerID: rand.Text()}
	var err error
	if p.Netns, err = l.netns(fmt.Sprintf("pod-%s-%s", namespace, name)); err != nil {
		return nil, err
	}
	if err := run(p.Netns, "ip", "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	ctx := context.Background()
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node.Name,
			Containers: []corev1.Container{{Name: "router", Image: "router"}},
		},
	}
	if err := l.Client.Create(ctx, obj); err != nil {
		return nil, fmt.Errorf("create Pod %s/%s: %w", namespace, name, err)
	}
	l.onClose(func() error { return client.IgnoreNotFound(l.Client.Delete(context.Background(), obj)) })
	obj.Status.Phase = corev1.PodPending
	obj.Status.HostIP = node.IP.String()
	obj.Status.HostIPs = []corev1.HostIP{{IP: node.IP.String()}}
	if err := l.Client.Status().Update(ctx, obj); err != nil {
		return nil, fmt.Errorf("write status of Pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}

// NewSandbox replaces the pod's sandbox as a runtime does when it makes a
// pod's sandbox again (kubelet after a failed ADD, a node restart): a new
// network namespace and container id, the Pod object kept. The old
// namespace stays until the lab closes; it is the caller's to DEL first.
func (p *Pod) NewSandbox() error {
	ns, err := p.lab.netns(fmt.Sprintf("pod-%s-%s-%s", p.Namespace, p.Name, strings.ToLower(rand.Text()[:6])))
	if err != nil {
		return err
	}
	if err := run(ns, "ip", "link", "set", "lo", "up"); err != nil {
		return err
	}
	p.Netns, p.ContainerID = ns, rand.Text()
	return nil
}

// CNI runs one CNI command (ADD, DEL, CHECK) for the pod as the runtime
// does: libcni with the conflist meshnetd installed on the pod's node.
func (p *Pod) CNI(ctx context.Context, command string) (types.Result, error) {
	list, err := libcni.ConfListFromFile(filepath.Join(p.Node.ConfDir, cniconf.FileName))
	if err != nil {
		return nil, fmt.Errorf("load conflist of node %s: %w", p.Node.Name, err)
	}
	return p.CNIWith(ctx, command, list, p.Netns)
}

// CNIWith runs a command with a given conflist and CNI_NETNS.
func (p *Pod) CNIWith(ctx context.Context, command string, list *libcni.NetworkConfigList, netnsPath string) (types.Result, error) {
	c := p.Node.cni()
	rt := &libcni.RuntimeConf{
		ContainerID: p.ContainerID,
		NetNS:       netnsPath,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID},
		},
	}
	switch command {
	case "ADD":
		res, err := c.AddNetworkList(ctx, list, rt)
		if err != nil {
			return nil, err
		}
		// As a kubelet's status manager, apart from the runtime's call.
		go func() {
			if err := p.running(context.Background()); err != nil {
				p.lab.log.Warn("pod not reported running", "pod", p.Namespace+"/"+p.Name, "error", err)
			}
		}()
		return res, nil
	case "DEL":
		return nil, c.DelNetworkList(ctx, list, rt)
	case "CHECK":
		return nil, c.CheckNetworkList(ctx, list, rt)
	}
	return nil, fmt.Errorf("unknown CNI command %q", command)
}

// Run runs a command in the pod's namespace and returns its output.
func (p *Pod) Run(name string, args ...string) (string, error) {
	return output(p.Netns, name, args...)
}

func (n *Node) cni() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{n.BinDir}, filepath.Join(n.Dir, "cache"), nil)
}

// CNIStatus runs CNI STATUS of a conflist on the node, as the runtime does
// to learn whether the network is ready.
func (n *Node) CNIStatus(ctx context.Context, list *libcni.NetworkConfigList) error {
	return n.cni().GetStatusNetworkList(ctx, list)
}

// running reports the pod Running and Ready, as a kubelet does once the
// sandbox has its network and the containers started: the Node Graph paints
// a Pending pod as not up.
func (p *Pod) running(ctx context.Context) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj := &corev1.Pod{}
		if err := p.lab.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, obj); err != nil {
			return err
		}
		now := metav1.Now()
		obj.Status.Phase = corev1.PodRunning
		obj.Status.StartTime = &now
		obj.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		return p.lab.Client.Status().Update(ctx, obj)
	})
	if client.IgnoreNotFound(err) != nil { // a test may have deleted the object
		return fmt.Errorf("report Pod %s/%s running: %w", p.Namespace, p.Name, err)
	}
	return nil
}
