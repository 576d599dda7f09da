package meshnetctl

import (
	"context"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kernelstatus"
	"github.com/meshnet/meshnet/internal/relayapi"
)

// runtimeCall is a runtime change as meshnetd's REST API takes it, below
// the pod's path: links/INTERFACE/tail.
type runtimeCall struct {
	method, tail string
	body         proto.Message // nil for none
	// undo is the command that takes the change back.
	undo string
}

// specEnd is what a Topology says of one end of a link: the spec's link
// and the fields the controller manages there (its link status's list).
type specEnd struct {
	pod     string
	link    *v1beta1.Link
	managed []string
}

// says reports whether e's Topology sets f, or the controller set it
// before and will undo it (managed).
func (e specEnd) says(f linkField) (set, managed bool) {
	if e.link == nil {
		return false, false
	}
	return f.value(e.link) != nil, slices.Contains(e.managed, f.name)
}

// runtimeNote says how long a runtime change of field f of the link at
// index in the spec lasts, from what the Topologies of its end and, for
// the state, of its far end (far, when a pod's) say: a link is one cable,
// down when either end's Topology says down, and the controller converges
// both ends at its next pass over either pod. A field neither sets nor had
// set stays as the change left it.
func runtimeNote(index int, f linkField, end, far specEnd, undo string) string {
	field := fmt.Sprintf("spec.links[%d].%s", index, f.name)
	set, managed := end.says(f)
	farSet, farManaged := false, false
	if f.name == "state" {
		farSet, farManaged = far.says(f)
	}
	switch {
	case farSet:
		want := v1beta1.LinkUp
		if s := end.link.State; s != nil && *s == v1beta1.LinkDown {
			want = v1beta1.LinkDown
		}
		if *far.link.State == v1beta1.LinkDown {
			want = v1beta1.LinkDown
		}
		return fmt.Sprintf("%s is %s and %s's end says %s, so meshnet-controller puts the link back %s at its next pass over either pod (its --resync)",
			field, f.spell(end.link), far.pod, f.spell(far.link), want)
	case set:
		return fmt.Sprintf("%s is %s, which meshnet-controller puts back at its next pass over the pod (its --resync)", field, f.spell(end.link))
	case managed || farManaged:
		return fmt.Sprintf("%s was dropped from the Topology, so meshnet-controller undoes it at its next pass over the pod (its --resync)", field)
	}
	if undo != "" {
		undo = " (" + undo + ")"
	}
	return fmt.Sprintf("%s is not set, so the kernel keeps it until it is changed again%s or the pod restarts", field, undo)
}

// farEnd is what the Topology of the pod at the far end of pod's link l
// says of it: nothing for a peer that is no pod, or has no Topology.
func (o *options) farEnd(ctx context.Context, namespace, pod string, l *v1beta1.Link) (specEnd, error) {
	if l.PeerPod == v1beta1.PeerHost || l.LinkOptions != nil {
		return specEnd{}, nil
	}
	var t v1beta1.Topology
	if err := o.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: l.PeerPod}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return specEnd{}, nil
		}
		return specEnd{}, err
	}
	for i := range t.Spec.Links {
		if pl := &t.Spec.Links[i]; pl.UID == l.UID && pl.PeerPod == pod {
			return specEnd{pod: t.Name, link: pl, managed: t.LinkManagedFields(pl.UID)}, nil
		}
	}
	return specEnd{}, nil
}

// runtimeChange makes call on pod's link intf in the kernel of the pod's
// node only, through the aggregated API, and prints what changed (to
// value, in f's words) and the link as the kernel has it after. The
// Topology is read first, so that a pod or interface it lacks is named as
// the other commands name it, and is not changed.
func (o *options) runtimeChange(ctx context.Context, w io.Writer, pod, intf string, f linkField, value string, call runtimeCall) error {
	t, err := o.topology(ctx, pod)
	if err != nil {
		return err
	}
	index, err := linkIndex(t, intf)
	if err != nil {
		return err
	}
	api, err := o.aggregated(o.rest.Timeout)
	if err != nil {
		return err
	}
	req := api.Verb(call.method).AbsPath(relayapi.ProxyPath(o.namespace, pod, "links/"+intf+"/"+call.tail))
	if call.body != nil {
		data, err := protojson.Marshal(call.body)
		if err != nil {
			return err
		}
		req = req.SetHeader("Content-Type", "application/json").Body(data)
	}
	data, err := do(ctx, req)
	if err != nil {
		return err
	}
	// Every change answers with the link read back, as "link".
	var resp meshnetv1.SetLinkStateResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("read the aggregated API's answer: %w", err)
	}
	l := t.Spec.Links[index]
	end := specEnd{pod: pod, link: &l, managed: t.LinkManagedFields(l.UID)}
	far, err := o.farEnd(ctx, t.Namespace, pod, &l)
	if err != nil {
		return fmt.Errorf("the change is made; reading the far end's Topology: %w", err)
	}
	fmt.Fprintf(w, "link %s/%s %s set to %s in the kernel only; %s\n", pod, intf, f.name, value, runtimeNote(index, f, end, far, call.undo))
	ls := &v1beta1.LinkStatus{UID: l.UID, LocalIntf: intf}
	kernelstatus.Fill(ls, resp.GetLink())
	return printLinks(w, []linkView{{Namespace: t.Namespace, Pod: t.Name, Peer: peerOf(t, &l), Spec: l, Status: ls}}, false, false)
}
