//go:build cluster

package topofile

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netemconv"
)

// agreementCase is one link of r1 to r2: its netem block (JSON), MTU and
// state, and whether it is valid.
type agreementCase struct {
	name  string
	netem string // JSON object, "" for none
	mtu   string // JSON number, "" for none
	state string // "" for none
	valid bool
}

var agreementCases = []agreementCase{
	{"delay", `{"delay":"50ms"}`, "", "", true},
	{"delay and jitter", `{"delay":"50ms","jitter":"5ms"}`, "", "", true},
	{"delay_correlation with jitter", `{"delay":"50ms","jitter":"5ms","delay_correlation":"25%"}`, "", "", true},
	{"distribution normal", `{"delay":"50ms","jitter":"5ms","distribution":"normal"}`, "", "", true},
	{"distribution pareto", `{"delay":"50ms","jitter":"5ms","distribution":"pareto"}`, "", "", true},
	{"distribution paretonormal", `{"delay":"50ms","jitter":"5ms","distribution":"paretonormal"}`, "", "", true},
	{"distribution uniform", `{"delay":"50ms","jitter":"5ms","distribution":"uniform"}`, "", "", true},
	{"loss", `{"loss":"1%"}`, "", "", true},
	{"loss without percent sign", `{"loss":"0.5"}`, "", "", true},
	{"loss 100%", `{"loss":"100%"}`, "", "", true},
	{"loss_correlation with loss", `{"loss":"1%","loss_correlation":"25%"}`, "", "", true},
	{"loss_correlation with zero loss (a no-op)", `{"loss":"0%","loss_correlation":"25%"}`, "", "", true},
	{"gap with zero reorder (a no-op)", `{"delay":"1ms","reorder":"0","gap":5}`, "", "", true},
	{"delay_correlation with zero jitter (a no-op)", `{"delay":"1ms","jitter":"0s","delay_correlation":"25%"}`, "", "", true},
	{"duplicate_correlation with duplicate", `{"duplicate":"1","duplicate_correlation":"10"}`, "", "", true},
	{"corrupt_correlation with corrupt", `{"corrupt":"0.1%","corrupt_correlation":"5"}`, "", "", true},
	{"reorder with delay and gap", `{"delay":"10ms","reorder":"25%","reorder_correlation":"50","gap":5}`, "", "", true},
	{"rate mbit", `{"rate":"100mbit"}`, "", "", true},
	{"rate mbps", `{"rate":"10mbps"}`, "", "", true},
	{"rate gbit", `{"rate":"1gbit"}`, "", "", true},
	{"rate of one bit, rounded to a byte", `{"rate":"1bit"}`, "", "", true},
	{"limit", `{"limit":1000}`, "", "", true},
	{"delay of minutes and seconds", `{"delay":"1m30s"}`, "", "", true},
	{"delay at meshnet's cap", `{"delay":"1h"}`, "", "", true},
	{"limit at meshnet's cap", `{"limit":65536}`, "", "", true},
	{"delay in us", `{"delay":"250us"}`, "", "", true},
	{"jitter at the kernel's cap", `{"delay":"1s","jitter":"2147483647ns"}`, "", "", true},
	{"empty netem", `{}`, "", "", true},
	{"mtu 68", "", "68", "", true},
	{"mtu 65535", "", "65535", "", true},
	{"mtu 9000 with netem", `{"delay":"1ms"}`, "9000", "", true},
	{"state down", "", "", "down", true},
	{"state up", "", "", "up", true},

	{"negative delay", `{"delay":"-5ms"}`, "", "", false},
	{"delay not a duration", `{"delay":"fast"}`, "", "", false},
	{"delay in µs", `{"delay":"5µs"}`, "", "", false},
	{"delay without unit", `{"delay":"0"}`, "", "", false},
	{"jitter without delay", `{"jitter":"1ms"}`, "", "", false},
	{"zero delay", `{"delay":"0s"}`, "", "", false},
	{"jitter with zero delay", `{"delay":"0s","jitter":"1ms"}`, "", "", false},
	{"loss_correlation 0 without loss", `{"loss_correlation":"0"}`, "", "", false},
	{"jitter over the kernel's cap", `{"delay":"1s","jitter":"2147483648ns"}`, "", "", false},
	{"delay_correlation without jitter", `{"delay":"10ms","delay_correlation":"25%"}`, "", "", false},
	{"distribution without jitter", `{"delay":"10ms","distribution":"normal"}`, "", "", false},
	{"unknown distribution", `{"delay":"1ms","jitter":"1ms","distribution":"flat"}`, "", "", false},
	{"loss over 100%", `{"loss":"101%"}`, "", "", false},
	{"loss in e notation", `{"loss":"1e1"}`, "", "", false},
	{"loss_correlation without loss", `{"loss_correlation":"25%"}`, "", "", false},
	{"duplicate_correlation without duplicate", `{"duplicate_correlation":"5"}`, "", "", false},
	{"corrupt_correlation without corrupt", `{"corrupt_correlation":"5"}`, "", "", false},
	{"reorder without delay", `{"reorder":"25%"}`, "", "", false},
	{"reorder_correlation without reorder", `{"delay":"1ms","reorder_correlation":"5"}`, "", "", false},
	{"gap without reorder", `{"delay":"1ms","gap":5}`, "", "", false},
	{"gap 0", `{"delay":"1ms","reorder":"5","gap":0}`, "", "", false},
	{"rate not a rate", `{"rate":"fast"}`, "", "", false},
	{"rate with a space", `{"rate":"100 mbit"}`, "", "", false},
	{"limit 0", `{"limit":0}`, "", "", false},
	{"limit over meshnet's cap", `{"limit":65537}`, "", "", false},
	{"delay over meshnet's cap", `{"delay":"1h0m1s"}`, "", "", false},
	{"mtu 67", "", "67", "", false},
	{"mtu 65536", "", "65536", "", false},
}

// TestClusterValidationAgrees runs every case through the three places a
// link is checked, which must agree: the CRD's admission on a real API
// server, the topology-file importer, and meshnetd, through what the
// controller sends it (the netem block converted as the controller does,
// then ApplyPod's validation on a real LinkService).
func TestClusterValidationAgrees(t *testing.T) {
	if len(agreementCases) < 40 {
		t.Fatalf("%d cases, want at least 40", len(agreementCases))
	}
	env := clustertest.Start(t)
	ctx := context.Background()
	const ns = "agree"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	store, err := podstore.Open(filepath.Join(t.TempDir(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"r1", "r2"} {
		peer := map[string]string{"r1": "r2", "r2": "r1"}[name]
		if err := store.Put(podstore.Pod{Namespace: ns, Name: name, ContainerID: "c-" + name, Netns: "/run/netns/agree-none-" + name,
			Links: []podstore.Link{{UID: 1, LocalIntf: "eth1", Kind: v1beta1.LinkKindVeth, PeerPod: peer, PeerIntf: "eth1"}}}); err != nil {
			t.Fatal(err)
		}
	}
	meshnetd := podlinkstest.Start(t, podlinkstest.Options{Pods: store}).Client(t, "")

	for i, c := range agreementCases {
		t.Run(c.name, func(t *testing.T) {
			var extra []string
			if c.netem != "" {
				extra = append(extra, `"netem":`+c.netem)
			}
			if c.mtu != "" {
				extra = append(extra, `"mtu":`+c.mtu)
			}
			if c.state != "" {
				extra = append(extra, `"state":"`+c.state+`"`)
			}
			fields := strings.Join(extra, ",")

			// The API server.
			obj := &unstructured.Unstructured{}
			link := `{"uid":1,"peer_pod":"r2","local_intf":"eth1","peer_intf":"eth1"` + prefixComma(fields) + `}`
			doc := fmt.Sprintf(`{"apiVersion":"networkop.co.uk/v1beta1","kind":"Topology","metadata":{"namespace":%q,"name":"t%d"},"spec":{"links":[%s]}}`, ns, i, link)
			if err := json.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("case JSON: %v", err)
			}
			apiErr := env.Client.Create(ctx, obj)

			// The importer.
			file := `{"links":[{"endpoints":["r1:eth1:10.0.0.1/30","r2:eth1:10.0.0.2/30"]` + prefixComma(fields) + `}]}`
			f, importErr := Parse([]byte(file))
			if importErr == nil {
				_, importErr = f.Topologies(ns)
			}

			// meshnetd, through the controller's conversion.
			var l v1beta1.Link
			daemonErr := json.Unmarshal([]byte(link), &l)
			if daemonErr == nil {
				spec := &meshnetv1.LinkSpec{Interface: "eth1"}
				if l.Netem != nil {
					s, err := netemconv.FromTopology(l.Netem)
					daemonErr = err
					spec.Netem = netemconv.ToProto(s)
				}
				if l.MTU != nil {
					mtu := uint32(*l.MTU)
					spec.Mtu = &mtu
				}
				if l.State != nil {
					state := meshnetv1.LinkState_LINK_STATE_UP
					if *l.State == v1beta1.LinkDown {
						state = meshnetv1.LinkState_LINK_STATE_DOWN
					}
					spec.State = &state
				}
				if daemonErr == nil {
					_, err := meshnetd.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{spec}})
					if status.Code(err) == codes.InvalidArgument {
						daemonErr = err
					}
				}
			}

			verdict := func(err error) string {
				if err == nil {
					return "valid"
				}
				return "invalid (" + err.Error() + ")"
			}
			want := map[bool]string{true: "valid", false: "invalid"}[c.valid]
			for place, err := range map[string]error{"API server": apiErr, "importer": importErr, "meshnetd": daemonErr} {
				if (err == nil) != c.valid {
					t.Errorf("%s: %s, want %s", place, verdict(err), want)
				}
			}
		})
	}
}

func prefixComma(s string) string {
	if s == "" {
		return ""
	}
	return "," + s
}
