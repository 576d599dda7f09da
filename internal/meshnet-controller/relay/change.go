package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/relayapi"
	"github.com/meshnet/meshnet/internal/restapi"
)

// relayed reports whether method is one of the LinkService calls a user
// makes through the relay on their pod's node: runtime changes of its
// links and routes, which change the kernel and not the Topology.
// ApplyPod is meshnet-controller's own; reads and streams have paths of
// their own.
func relayed(method string) bool {
	switch method {
	case meshnetv1.LinkService_SetLinkState_FullMethodName, meshnetv1.LinkService_SetNetem_FullMethodName,
		meshnetv1.LinkService_ClearNetem_FullMethodName, meshnetv1.LinkService_SetRoutes_FullMethodName:
		return true
	}
	return false
}

// changeAccess is the call whose access rule every relayed call shares
// (TestRelayedShareAccess): the user is authorized by it before the
// request's body is read.
const changeAccess = meshnetv1.LinkService_SetLinkState_FullMethodName

// Bounds of a relayed change: its body (a route set is the largest, well
// under this), and its time (a cable pull of a VXLAN link waits for the far
// node too).
const (
	maxChangeBody = 64 << 10
	changeTimeout = 30 * time.Second
)

// newChanges serves the runtime changes below a pod's proxy subresource
// with meshnetd's own REST mapping (grpc-gateway's, generated from the
// proto): PUT .../pods/r1/proxy/links/eth1/state is meshnetd's
// PUT /v1/namespaces/NS/pods/r1/links/eth1/state. The API server has
// authorized update or delete on pods/proxy; the relay then authorizes the
// user as meshnetd does its own callers (patch on the namespace's
// Topologies), and makes the call on the pod's node with the controller's
// credentials.
func (s *Server) newChanges() (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restapi.DefaultMarshaler()),
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(func(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
			var se apierrors.APIStatus
			if !errors.As(err, &se) {
				err = fromGRPC(err)
			}
			log := s.log
			if c := callOf(ctx); c != nil {
				log = c.log
			}
			s.refuse(w, log, err)
		}),
		runtime.WithRoutingErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
			reason := metav1.StatusReasonNotFound
			if code == http.StatusMethodNotAllowed {
				reason = metav1.StatusReasonMethodNotAllowed
			}
			writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{Code: int32(code), Reason: reason,
				Message: fmt.Sprintf("%s %s: not a change meshnet relays (meshnetd's REST paths of SetLinkState, SetNetem, ClearNetem and SetRoutes below /v1/namespaces/NS/pods/POD are)", r.Method, r.URL.Path)}})
		}),
	)
	// The generated handlers call this client; each call finds its user
	// and pod in the request's context.
	if err := meshnetv1.RegisterLinkServiceHandlerClient(context.Background(), gw, meshnetv1.NewLinkServiceClient(userConn{s})); err != nil {
		return nil, fmt.Errorf("register LinkService's REST handlers: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, pod := r.PathValue("namespace"), r.PathValue("pod")
		log := s.log.With("pod", ns+"/"+pod)
		user, err := s.authenticate(r)
		if err != nil {
			s.refuse(w, log, err)
			return
		}
		log = log.With("user", user.Username)
		if err := restapi.KnownParams(withoutTimeout(r.URL.Query())); err != nil {
			s.refuse(w, log, apierrors.NewBadRequest(err.Error()))
			return
		}
		// Before the body is read: a user who may not change the links
		// has nothing of theirs read.
		if err := s.authorize(r.Context(), user, changeAccess, ns); err != nil {
			s.refuse(w, log, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), changeTimeout)
		defer cancel()
		ctx = context.WithValue(ctx, callKey{}, &call{user: user, namespace: ns, pod: pod, log: log})
		// meshnetd's own path of the same call.
		in := r.Clone(ctx)
		in.URL = &url.URL{Path: "/v1/namespaces/" + ns + "/pods/" + pod + "/" + r.PathValue("rest")}
		in.RequestURI = ""
		in.Body = http.MaxBytesReader(w, r.Body, maxChangeBody)
		gw.ServeHTTP(w, in)
	}), nil
}

// call is a relayed change's user and pod, from its request.
type call struct {
	user           authnv1.UserInfo
	namespace, pod string
	log            *slog.Logger
}

// callKey is the context key of a relayed change's call.
type callKey struct{}

// proxyResource names the proxy subresource in errors.
var proxyResource = schema.GroupResource{Group: relayapi.Group, Resource: relayapi.Resource + "/" + relayapi.ProxySubresource}

// callOf is the call of ctx's request, nil outside the relay's handler.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// userConn makes the relayed calls of the changes' REST handlers: it
// authorizes the user and calls the meshnetd of the pod's node.
type userConn struct{ s *Server }

// Invoke makes a unary call for the user of ctx's request, whose right
// to change the pod's links newChanges has checked. It returns the API's
// status errors, and meshnetd's (gRPC) as they are, for the error handler.
func (u userConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c := callOf(ctx)
	if c == nil {
		return status.Error(codes.Internal, "relay: a call without its request")
	}
	if !relayed(method) {
		return apierrors.NewMethodNotSupported(proxyResource, method+" (only runtime changes of links and routes are relayed)")
	}
	req, ok := args.(interface {
		GetNamespace() string
		GetPod() string
	})
	if !ok {
		return status.Errorf(codes.Internal, "relay: %s's request names no pod", method)
	}
	// The path the API server authorized is the pod acted on (grpc-gateway
	// sets the path's fields over the body's).
	if req.GetNamespace() != c.namespace || req.GetPod() != c.pod {
		return apierrors.NewBadRequest(fmt.Sprintf("namespace, pod: the body names %s/%s, the path %s/%s", req.GetNamespace(), req.GetPod(), c.namespace, c.pod))
	}
	conn, node, err := u.s.podDaemon(ctx, c.namespace, c.pod)
	if err != nil {
		return err
	}
	c.log = c.log.With("node", node, "method", method)
	if l, ok := args.(interface{ GetInterface() string }); ok {
		c.log = c.log.With("link", l.GetInterface())
	}
	// A fresh outgoing context: grpc-gateway passes the request's
	// Authorization on whatever its header matcher says, and the pool's
	// credentials must be the only ones.
	if err := conn.Invoke(metadata.NewOutgoingContext(ctx, metadata.MD{}), method, args, reply, opts...); err != nil {
		return fromDaemon(err)
	}
	c.log.Info("runtime change relayed")
	return nil
}

// NewStream refuses: the streams (capture, watch) have paths of their own.
func (userConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, apierrors.NewMethodNotSupported(proxyResource, method)
}
