package relay

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/relayapi"
	"github.com/meshnet/meshnet/internal/restapi"
)

// readTopologies is what reading a namespace's links through the relay
// needs: whoever may list its Topologies (and so read the status the kernel
// reported) may read their live counters. meshnetd's own reads are open to
// any valid token; here the user's right decides, as for the status.
var readTopologies = auth.Access{Verb: "list", Group: v1beta1.GroupVersion.Group, Resource: "topologies"}

// links reads the link ends of a namespace's pods, or of one pod, with
// their kernel counters, from the meshnetds of the nodes that host them.
func (s *Server) links(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	log := s.log.With("namespace", ns)
	user, err := s.authenticate(r)
	if err != nil {
		s.refuse(w, log, err)
		return
	}
	log = log.With("user", user.Username)
	q := withoutTimeout(r.URL.Query())
	if err := restapi.KnownParams(q, relayapi.PodParam, relayapi.WatchParam); err != nil {
		s.refuse(w, log, apierrors.NewBadRequest(err.Error()))
		return
	}
	pod := q.Get(relayapi.PodParam)
	watch := watchParam(q)
	if pod != "" {
		log = log.With("pod", ns+"/"+pod)
	}
	if err := s.cfg.Checker.Authorize(r.Context(), user, readTopologies, ns); err != nil {
		s.refuse(w, log, fromGRPC(err))
		return
	}
	if watch {
		s.watchLinks(w, r, log, ns, pod)
		return
	}
	nodes, err := s.podNodes(r.Context(), ns, pod)
	if err != nil {
		s.refuse(w, log, err)
		return
	}
	ends, err := s.nodeLinks(r.Context(), ns, nodes)
	if err != nil {
		s.refuse(w, log, fromDaemon(err))
		return
	}
	out := &meshnetv1.ListLinksResponse{}
	for _, e := range ends {
		if pod == "" || e.GetPod().GetName() == pod {
			out.Links = append(out.Links, e)
		}
	}
	slices.SortFunc(out.Links, func(a, b *meshnetv1.LinkStatus) int {
		return cmp.Or(strings.Compare(a.GetPod().GetName(), b.GetPod().GetName()), strings.Compare(a.GetInterface(), b.GetInterface()))
	})
	data, err := protojson.Marshal(out)
	if err != nil {
		s.refuse(w, log, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// watchParam reads the watch parameter as the API server reads it, which
// has authorized the request as a watch then: its first value, any case,
// anything but "0" and "false" meaning true.
func watchParam(q url.Values) bool {
	v, ok := q[relayapi.WatchParam]
	if !ok || len(v) == 0 {
		return false
	}
	return v[0] != "0" && !strings.EqualFold(v[0], "false")
}

// watchLinks streams the link events of the namespace's pods (or of one
// pod) from the meshnetd of every node they are on, one JSON object a
// line (meshnetd's WatchLinksResponse), until the client leaves. Nodes
// that the namespace's pods reach later are watched from the next scan
// (every watchScan); a node whose stream ends is watched again from the
// scan after, starting with its listing (ADDED ... SYNCED) again.
func (s *Server) watchLinks(w http.ResponseWriter, r *http.Request, log *slog.Logger, ns, pod string) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.refuse(w, log, apierrors.NewInternalError(errors.New("the response cannot stream")))
		return
	}
	// The streams' goroutines end when ctx does: cancel runs before Wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events := make(chan *meshnetv1.WatchLinksResponse, 1024)
	ended := make(chan string)
	watching := map[string]bool{}
	// A node's stream is opened in its own goroutine, so that a node slow
	// to answer holds up neither the others nor the response. A node that
	// fails is logged once per watch, and tried again at every scan.
	var failed sync.Map
	scan := func() error {
		nodes, err := s.podNodes(ctx, ns, pod)
		if err != nil {
			return err
		}
		for _, node := range nodes {
			if watching[node] {
				continue
			}
			watching[node] = true
			wg.Go(func() {
				defer func() {
					select {
					case ended <- node:
					case <-ctx.Done():
					}
				}()
				var stream grpc.ServerStreamingClient[meshnetv1.WatchLinksResponse]
				conn, err := s.daemon(ctx, node)
				if err == nil {
					stream, err = meshnetv1.NewLinkServiceClient(conn).WatchLinks(ctx, &meshnetv1.WatchLinksRequest{Namespace: ns, Pod: pod})
				}
				for received := false; err == nil; received = true {
					var ev *meshnetv1.WatchLinksResponse
					if ev, err = stream.Recv(); err != nil {
						break
					}
					if !received {
						failed.Delete(node) // logged again if it fails again
					}
					select {
					case events <- ev:
					case <-ctx.Done():
						return
					}
				}
				if _, logged := failed.LoadOrStore(node, true); !logged && ctx.Err() == nil {
					log.Info("node not watched; tried again at every scan", "node", node, "error", err)
				}
			})
		}
		return nil
	}
	if err := scan(); err != nil {
		s.refuse(w, log, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	log.Info("watch relayed", "nodes", len(watching))
	start := time.Now()
	defer func() { log.Info("watch ended", "took", time.Since(start).Round(time.Millisecond)) }()
	tick := time.NewTicker(watchScan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case node := <-ended:
			delete(watching, node)
		case <-tick.C:
			if err := scan(); err != nil {
				log.Info("pods not listed; scanning again later", "error", err)
			}
		case ev := <-events:
			data, err := protojson.Marshal(ev)
			if err != nil {
				log.Error("event not encoded", "error", err)
				continue
			}
			if _, err := w.Write(append(data, '\n')); err != nil {
				return
			}
			if len(events) == 0 {
				flusher.Flush()
			}
		}
	}
}

// watchScan is how often a relayed watch looks for nodes the namespace's
// pods reached since.
const watchScan = 5 * time.Second

// podNodes is the nodes the namespace's pods are on, or the one pod's
// (none while it is on no node yet), sorted; NotFound when that pod does
// not exist.
func (s *Server) podNodes(ctx context.Context, ns, pod string) ([]string, error) {
	var pods corev1.PodList
	if err := s.cfg.Pods.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	nodes := map[string]bool{}
	found := false
	for _, p := range pods.Items {
		if pod == "" || p.Name == pod {
			found = true
			if p.Spec.NodeName != "" {
				nodes[p.Spec.NodeName] = true
			}
		}
	}
	if pod != "" && !found {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), pod)
	}
	return slices.Sorted(maps.Keys(nodes)), nil
}

// nodeLinks asks every node's meshnetd at once for the namespace's link
// ends; a node that does not answer fails the read, named.
func (s *Server) nodeLinks(ctx context.Context, ns string, nodes []string) ([]*meshnetv1.LinkStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeReadTimeout)
	defer cancel()
	d := &daemonclient.Daemons{Resolver: s.cfg.Daemons, Dial: s.cfg.Pool.Conn}
	got := make([][]*meshnetv1.LinkStatus, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { got[i], errs[i] = d.NodeLinks(ctx, n, ns) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(got...), nil
}

// nodeReadTimeout bounds a read of the nodes' link ends.
const nodeReadTimeout = 10 * time.Second
