package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/topofile"
)

// Deployment is a topology file's pods and physical devices in a lab.
type Deployment struct {
	Namespace string
	Pods      []*Pod
	Physicals []*Physical
}

// Pod returns the deployed pod of that name, or nil.
func (d *Deployment) Pod(name string) *Pod {
	for _, p := range d.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Deploy brings up f's topology in namespace as a cluster would: it creates
// the Topology objects, then each pod's sandbox (placed round-robin over the
// nodes, in the file's order) and runs CNI ADD for all pods at once. For each
// physical device it stands a device in at its remote_vtep and configures
// that side from what the pod's status shows, as an operator would.
func (l *Lab) Deploy(ctx context.Context, f *topofile.File, namespace string) (*Deployment, error) {
	nodes := l.Nodes()
	if len(nodes) == 0 {
		return nil, errors.New("deploy: the lab has no nodes")
	}
	topos, err := f.Topologies(namespace)
	if err != nil {
		return nil, err
	}
	if err := l.Namespace(namespace); err != nil {
		return nil, err
	}
	for i := range topos {
		if err := l.Client.Create(ctx, &topos[i]); err != nil {
			return nil, fmt.Errorf("create Topology %s/%s: %w", namespace, topos[i].Name, err)
		}
	}
	d := &Deployment{Namespace: namespace}
	for i, name := range f.Pods() {
		p, err := l.AddPod(nodes[i%len(nodes)], namespace, name)
		if err != nil {
			return nil, err
		}
		d.Pods = append(d.Pods, p)
	}
	if err := addAll(ctx, d.Pods); err != nil {
		return nil, err
	}
	if d.Physicals, err = l.standIn(ctx, namespace, f.PhysicalPeers()); err != nil {
		return nil, err
	}
	return d, nil
}

// addAll runs CNI ADD for every pod concurrently, as kubelets on many nodes
// start pods: whichever end comes second completes each link.
func addAll(ctx context.Context, pods []*Pod) error {
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			if _, err := p.CNI(ctx, "ADD"); err != nil {
				errs[i] = fmt.Errorf("CNI ADD of pod %s/%s on %s: %w", p.Namespace, p.Name, p.Node.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// standIn makes one device per physical device name and configures a VXLAN
// interface on it for each of its links.
func (l *Lab) standIn(ctx context.Context, namespace string, peers []topofile.PhysicalPeer) ([]*Physical, error) {
	byName := map[string]*Physical{}
	var devices []*Physical
	for _, peer := range peers {
		dev := byName[peer.Device.Name]
		if dev == nil {
			var err error
			if dev, err = l.AddPhysical(peer.Device.Name, peer.RemoteVTEP); err != nil {
				return nil, err
			}
			byName[peer.Device.Name] = dev
			devices = append(devices, dev)
		}
		shown, err := l.physicalStatus(ctx, namespace, peer.Pod.Name, peer.UID)
		if err != nil {
			return nil, err
		}
		if err := dev.Configure(shown, peer.Device.Intf, peer.Device.IP); err != nil {
			return nil, err
		}
	}
	return devices, nil
}

// physicalStatus waits for a pod's Topology status to show how to
// configure the physical side of link uid.
func (l *Lab) physicalStatus(ctx context.Context, namespace, pod string, uid int) (v1beta1.PhysicalPeer, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		topo := &v1beta1.Topology{}
		if err := l.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, topo); err == nil {
			for _, s := range topo.Status.Links {
				if s.UID == uid && s.Physical != nil {
					return *s.Physical, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return v1beta1.PhysicalPeer{}, fmt.Errorf("status of Topology %s/%s never showed the physical peer of link %d: %w", namespace, pod, uid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Converged waits until every Topology of namespace says Ready for its
// current generation.
func (l *Lab) Converged(ctx context.Context, namespace string) error {
	return l.WaitTopologies(ctx, namespace, func(topos []*v1beta1.Topology) string {
		for _, t := range topos {
			if !Ready(t) {
				return "Topology " + t.Name + " to be Ready"
			}
		}
		return ""
	})
}

// Ready is true when a Topology's status describes its current generation
// and says Ready.
func Ready(t *v1beta1.Topology) bool {
	c := t.ReadyCondition(t.Generation)
	return t.Status.ObservedGeneration == t.Generation && c != nil && c.Status == metav1.ConditionTrue
}
