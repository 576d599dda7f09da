// Package relay is meshnet's aggregated API, served by the controller: the
// path from the Kubernetes API server to the pods' nodes. The API server
// authenticates a user (client certificate, token or exec plugin, whatever
// their kubeconfig holds), authorizes the request on the aggregated API's
// resources (get on pods/proxy for a capture, update and delete on it for
// a runtime change of a link, list and watch on links, in
// meshnet.networkop.co.uk), and proxies it here with the user's identity
// in request headers, as it proxies kubectl top to metrics-server. The
// relay trusts those headers only from a client certificate of the API
// server's front proxy, authorizes the user against the namespace's
// Topologies (a capture or a change with the very rule meshnetd applies
// to its own callers: patch), and relays the call to the meshnetd of the pod's node,
// or of every node of the namespace's pods. So the user never needs the node addresses, nor a
// token of meshnet's.
package relay

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/access"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/partition"
	"github.com/meshnet/meshnet/internal/relayapi"
	"github.com/meshnet/meshnet/internal/restapi"
)

// The API server publishes its front proxy's settings in this ConfigMap,
// under these keys, for every aggregated API server to read.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMapName      = "extension-apiserver-authentication"
)

// Config is what a Server needs.
type Config struct {
	// Kube reads the front proxy's ConfigMap and makes the
	// SubjectAccessReviews (through Checker).
	Kube    kubernetes.Interface
	Checker *auth.Checker
	// Pods finds a pod's node.
	Pods    client.Reader
	Daemons partition.Finder
	// Pool reaches the daemons with the controller's own credentials.
	Pool *daemonclient.Pool
	// Addr is where the relay serves, with the certificate of the moment
	// (Keeper.GetCertificate).
	Addr           string
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Log            *slog.Logger
}

// Server serves the aggregated API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ca      *dynamiccertificates.ConfigMapCAController
	headers *headerrequest.RequestHeaderAuthRequestController
	authn   authenticator.Request
	// changes serves the runtime changes (newChanges).
	changes http.Handler
}

// New returns a Server; Run follows the front proxy's settings.
func New(cfg Config) (*Server, error) {
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("requestheader-client-ca",
		authConfigMapNamespace, authConfigMapName, "requestheader-client-ca-file", cfg.Kube)
	if err != nil {
		return nil, fmt.Errorf("front proxy CA: %w", err)
	}
	h := headerrequest.NewRequestHeaderAuthRequestController(authConfigMapName, authConfigMapNamespace, cfg.Kube,
		"requestheader-username-headers", "requestheader-uid-headers", "requestheader-group-headers",
		"requestheader-extra-headers-prefix", "requestheader-allowed-names")
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, ca: ca, headers: h}
	if s.changes, err = s.newChanges(); err != nil {
		return nil, err
	}
	s.authn = headerrequest.NewDynamicVerifyOptionsSecure(ca.VerifyOptions,
		headerrequest.StringSliceProviderFunc(h.AllowedClientNames),
		headerrequest.StringSliceProviderFunc(h.UsernameHeaders), headerrequest.StringSliceProviderFunc(h.UIDHeaders),
		headerrequest.StringSliceProviderFunc(h.GroupHeaders), headerrequest.StringSliceProviderFunc(h.ExtraHeaderPrefixes))
	return s, nil
}

// Start follows the front proxy's settings, then serves on Config.Addr
// until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	s.follow(ctx)
	// The front proxy's client certificate is asked for, not required
	// here: the authenticator verifies it against the CA of the moment.
	srv := &http.Server{Addr: s.cfg.Addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:   &tls.Config{GetCertificate: s.cfg.GetCertificate, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12},
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	s.log.Info("aggregated API serving", "address", s.cfg.Addr, "apiservice", relayapi.APIService)
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the aggregated API on %s: %w", s.cfg.Addr, err)
	}
	return nil
}

// follow reads the front proxy's settings and follows their changes until
// ctx ends. It waits a while for the CA, so that the first requests are
// judged by it. An API server without a front proxy (no
// --requestheader-client-ca-file) proxies to no aggregated API: the relay
// then refuses every capture (401) rather than stopping the controller,
// and takes the settings when they appear.
func (s *Server) follow(ctx context.Context) {
	if err := errors.Join(s.ca.RunOnce(ctx), s.headers.RunOnce(ctx)); err != nil {
		s.log.Warn("the API server's front proxy settings are not readable yet", "configmap", authConfigMapNamespace+"/"+authConfigMapName, "error", err)
	}
	go s.ca.Run(ctx, 1)
	go s.headers.Run(ctx, 1)
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(s.ca.CurrentCABundleContent()) == 0 {
		select {
		case <-wait.Done():
			s.log.Warn("the API server publishes no front proxy CA: captures are refused until it does",
				"configmap", authConfigMapNamespace+"/"+authConfigMapName, "key", "requestheader-client-ca-file")
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NeedLeaderElection is false: every controller replica serves the API,
// the Service spreads requests over them.
func (s *Server) NeedLeaderElection() bool { return false }

// Handler serves discovery, captures, runtime changes and link reads.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /apis", s.discovery)
	mux.HandleFunc("GET /apis/"+relayapi.Group, s.discovery)
	mux.HandleFunc("GET "+relayapi.GroupVersionPath, s.discovery)
	mux.HandleFunc("GET "+relayapi.CapturePattern, s.capture)
	mux.Handle("PUT "+relayapi.ProxyPattern, s.changes)
	mux.Handle("DELETE "+relayapi.ProxyPattern, s.changes)
	mux.HandleFunc("GET "+relayapi.GroupVersionPath+"/namespaces/{namespace}/"+relayapi.LinksResource, s.links)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("%s %s: not part of %s (its resources are %s/%s and %s)", r.Method, r.URL.Path, relayapi.APIService,
				relayapi.Resource, relayapi.ProxySubresource, relayapi.LinksResource)}})
	})
	return mux
}

// discovery serves the API's discovery documents: they say what exists,
// which is no secret, and the API server's availability check reads them.
func (s *Server) discovery(w http.ResponseWriter, r *http.Request) {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: relayapi.Group + "/" + relayapi.Version, Version: relayapi.Version}
	group := metav1.APIGroup{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:     relayapi.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv,
	}
	var doc any
	switch r.URL.Path {
	case "/apis":
		doc = metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{group}}
	case "/apis/" + relayapi.Group:
		doc = group
	default:
		doc = metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: gv.GroupVersion,
			APIResources: []metav1.APIResource{{
				Name: relayapi.Resource + "/" + relayapi.ProxySubresource, Namespaced: true,
				Kind: "PodProxyOptions", Verbs: metav1.Verbs{"get", "update", "delete"},
			}, {
				Name: relayapi.LinksResource, Namespaced: true, Kind: "Link", Verbs: metav1.Verbs{"list", "watch"},
			}},
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

// capture relays a capture of one of a pod's links from its node's
// meshnetd.
func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	req := &meshnetv1.CaptureLinkRequest{Namespace: ns, Pod: name, Interface: r.PathValue("interface")}
	log := s.log.With("pod", ns+"/"+name, "link", req.Interface)
	user, err := s.authenticate(r)
	if err != nil {
		s.refuse(w, log, err)
		return
	}
	log = log.With("user", user.Username)
	if err := restapi.CaptureParams(withoutTimeout(r.URL.Query()), req); err != nil {
		s.refuse(w, log, apierrors.NewBadRequest(err.Error()))
		return
	}
	// The right to capture a link is the right to change it.
	if err := s.authorize(r.Context(), user, meshnetv1.LinkService_CaptureLink_FullMethodName, ns); err != nil {
		s.refuse(w, log, err)
		return
	}
	conn, node, err := s.podDaemon(r.Context(), ns, name)
	if err != nil {
		s.refuse(w, log, err)
		return
	}
	log = log.With("node", node)
	stream, err := meshnetv1.NewLinkServiceClient(conn).CaptureLink(r.Context(), req)
	if err != nil {
		s.refuse(w, log, fromDaemon(err))
		return
	}
	log.Info("capture relayed")
	start := time.Now()
	defer func() { log.Info("capture ended", "took", time.Since(start).Round(time.Millisecond)) }()
	restapi.WriteCapture(w, stream, func(err error) { s.refuse(w, log, fromDaemon(err)) })
}

// authorize decides whether user may make method on the pods of namespace
// ns by the rule meshnetd applies to its own callers of method, applied to
// the user; the refusal is the API's status.
func (s *Server) authorize(ctx context.Context, user authnv1.UserInfo, method, ns string) error {
	access, ok := access.Policy(false)[method]
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("%s is not in meshnetd's access policy", method))
	}
	if err := s.cfg.Checker.Authorize(ctx, user, access, ns); err != nil {
		return fromGRPC(err)
	}
	return nil
}

// podDaemon is the connection to the meshnetd of pod ns/name's node, and
// that node.
func (s *Server) podDaemon(ctx context.Context, ns, name string) (*grpc.ClientConn, string, error) {
	pod := &corev1.Pod{}
	if err := s.cfg.Pods.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		return nil, "", err
	}
	node := pod.Spec.NodeName
	if node == "" {
		return nil, "", apierrors.NewConflict(corev1.Resource("pods"), name, errors.New("the pod is on no node yet: its links do not exist"))
	}
	conn, err := s.daemon(ctx, node)
	return conn, node, err
}

// daemon is the connection to node's meshnetd.
func (s *Server) daemon(ctx context.Context, node string) (*grpc.ClientConn, error) {
	addr, err := s.cfg.Daemons.DaemonFor(ctx, node)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("meshnetd of node %s: %v", node, err))
	}
	conn, err := s.cfg.Pool.Conn(addr)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("meshnetd of node %s: %v", node, err))
	}
	return conn, nil
}

// refuse writes err as the request's Status, and logs why.
func (s *Server) refuse(w http.ResponseWriter, log *slog.Logger, err error) {
	log.Info("request refused", "error", err)
	writeStatus(w, err)
}

// withoutTimeout is q less the timeout parameter, which Kubernetes clients
// add for the API server (kubectl --request-timeout).
func withoutTimeout(q url.Values) url.Values {
	q.Del("timeout")
	return q
}

// authenticate reads the user the API server's front proxy names, from a
// request that presents the front proxy's client certificate.
func (s *Server) authenticate(r *http.Request) (authnv1.UserInfo, error) {
	res, ok, err := s.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		why := "no client certificate"
		if err != nil {
			why = err.Error()
		}
		return authnv1.UserInfo{}, apierrors.NewUnauthorized("meshnet's aggregated API is reached through the Kubernetes API server, and this request is not from its front proxy: " + why)
	}
	u := res.User
	extra := map[string]authnv1.ExtraValue{}
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	return authnv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra}, nil
}

// fromGRPC turns a meshnetd or checker error into the API's status: the
// user's mistakes keep their meaning (a bad request, a missing link, a
// refusal), as kubectl prints them.
func fromGRPC(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return apierrors.NewInternalError(err)
	}
	code := runtime.HTTPStatusFromCode(st.Code())
	reason := map[codes.Code]metav1.StatusReason{
		codes.InvalidArgument:    metav1.StatusReasonBadRequest,
		codes.NotFound:           metav1.StatusReasonNotFound,
		codes.PermissionDenied:   metav1.StatusReasonForbidden,
		codes.Unauthenticated:    metav1.StatusReasonUnauthorized,
		codes.FailedPrecondition: metav1.StatusReasonConflict,
		codes.AlreadyExists:      metav1.StatusReasonAlreadyExists,
		codes.Unavailable:        metav1.StatusReasonServiceUnavailable,
		codes.DeadlineExceeded:   metav1.StatusReasonTimeout,
		codes.ResourceExhausted:  metav1.StatusReasonTooManyRequests,
	}[st.Code()]
	if reason == "" {
		reason = metav1.StatusReasonInternalError
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: st.Message(),
	}}
}

// fromDaemon is fromGRPC for a meshnetd's answer to the relay, which calls
// with the controller's own credentials: a refusal of those is the
// installation's fault, not the user's, and says so rather than telling
// the user to log in.
func fromDaemon(err error) error {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return apierrors.NewInternalError(fmt.Errorf("meshnetd refused meshnet-controller's own credentials (its ServiceAccount needs patch on topologies): %w", err))
	case codes.Unknown:
		return apierrors.NewServiceUnavailable(err.Error())
	}
	return fromGRPC(err)
}

// writeStatus writes err as the Status object kubectl reads errors from.
func writeStatus(w http.ResponseWriter, err error) {
	st := apierrors.APIStatus(apierrors.NewInternalError(err))
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		st = se
	}
	s := st.Status()
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	s.Status = metav1.StatusFailure
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}

// Options are where and with which certificate a controller serves the
// relay.
type Options struct {
	// Addr is the relay's address.
	Addr string
	// Namespace holds Service, which the APIService names, and Secret,
	// which keeps the serving certificate (ServingCert).
	Namespace, Secret, Service string
}

// AddToManager has every replica of mgr's controller serve the relay, with
// the serving certificate kept in the Secret and trusted by the APIService.
func AddToManager(ctx context.Context, mgr manager.Manager, daemons partition.Finder, pool *daemonclient.Pool, log *slog.Logger, o Options) error {
	cfg := mgr.GetConfig()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("relay: client for %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("relay: client for %s: %w", cfg.Host, err)
	}
	keeper, err := NewKeeper(ctx, kube, dyn, log, o.Namespace, o.Secret, o.Service)
	if err != nil {
		return err
	}
	s, err := New(Config{Kube: kube, Checker: auth.NewChecker(kube, reviewTTL), Pods: mgr.GetCache(),
		Daemons: daemons, Pool: pool, Addr: o.Addr, GetCertificate: keeper.GetCertificate, Log: log})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err := mgr.Add(keeper); err != nil {
		return err
	}
	return mgr.Add(s)
}

// reviewTTL is how long a user's SubjectAccessReview answer is reused.
const reviewTTL = 10 * time.Second
