package access

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// TestEveryMethodHasItsRule: every method of meshnet's services is in the
// policy (one missing would be refused), with the rule its service has:
// changes and captures patch, reads list (open with readOpen), far ends
// patch topologies/status; each in the request's namespace.
func TestEveryMethodHasItsRule(t *testing.T) {
	reads := map[string]bool{"GetLink": true, "ListLinks": true, "WatchLinks": true}
	for _, readOpen := range []bool{false, true} {
		p := Policy(readOpen)
		for _, f := range []protoreflect.FileDescriptor{meshnetv1.File_meshnet_v1_link_proto, meshnetv1.File_meshnet_v1_data_proto, meshnetv1.File_meshnet_v1_peer_proto} {
			for i := range f.Services().Len() {
				svc := f.Services().Get(i)
				for j := range svc.Methods().Len() {
					m := svc.Methods().Get(j)
					name := "/" + string(svc.FullName()) + "/" + string(m.Name())
					a, ok := p[name]
					if !ok {
						t.Errorf("%s is not in the policy: it would be refused", name)
						continue
					}
					verb, sub := "patch", ""
					switch {
					case svc.Name() == "PeerService":
						sub = "status"
					case svc.Name() == "DataService" || reads[string(m.Name())]:
						verb = "list"
					}
					if verb == "list" && readOpen {
						if a.Verb != "" || a.Authenticated {
							t.Errorf("%s with reads open: %+v, want open", name, a)
						}
						continue
					}
					if a.Verb != verb || a.Group != "networkop.co.uk" || a.Resource != "topologies" || a.Subresource != sub || a.Namespace == nil {
						t.Errorf("%s (reads open %v): %s on %s/%s in %v, want %s on topologies/%s in the request's namespace", name, readOpen, a.Verb, a.Resource, a.Subresource, a.Namespace != nil, verb, sub)
					}
				}
			}
		}
	}
	a := Policy(false)[meshnetv1.LinkService_SetNetem_FullMethodName]
	if ns := a.Namespace(&meshnetv1.SetNetemRequest{Namespace: "lab"}); ns != "lab" {
		t.Errorf("SetNetem's namespace: %q, want the request's (lab)", ns)
	}
	a = Policy(false)[meshnetv1.PeerService_CreateRemoteEnd_FullMethodName]
	if ns := a.Namespace(&meshnetv1.CreateRemoteEndRequest{End: &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r2"}}}); ns != "lab" {
		t.Errorf("CreateRemoteEnd's namespace: %q, want its end's (lab)", ns)
	}
}

// TestPeerBatchNamespace: a batch of far ends is authorised in its ends'
// one namespace; ends of several namespaces need access in all of them, so
// that access in one cannot reach pods of another.
func TestPeerBatchNamespace(t *testing.T) {
	ns := Policy(false)[meshnetv1.PeerService_SetRemoteStates_FullMethodName].Namespace
	end := func(namespace string) *meshnetv1.SetRemoteStateRequest {
		return &meshnetv1.SetRemoteStateRequest{End: &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: namespace, Name: "r2"}}}
	}
	for _, c := range []struct {
		ends []*meshnetv1.SetRemoteStateRequest
		want string
	}{
		{[]*meshnetv1.SetRemoteStateRequest{end("lab"), end("lab")}, "lab"},
		{[]*meshnetv1.SetRemoteStateRequest{end("lab"), end("prod")}, ""},
		{nil, ""},
	} {
		if got := ns(&meshnetv1.SetRemoteStatesRequest{Ends: c.ends}); got != c.want {
			t.Errorf("namespace of %v: %q, want %q", c.ends, got, c.want)
		}
	}
}
