package cniplugin

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// Defaults of the plugin configuration. DefaultTimeout leaves 30 s of the
// kubelet's 4 minutes for a sandbox (twice its runtime request timeout) to
// the runtime and the primary plugin: the kernel makes 10,000 VXLAN links
// in about 2 minutes on two busy cores, and an ADD cut off at 2 minutes
// started again from nothing in a new sandbox, never to finish.
const (
	DefaultSocket  = "/run/meshnet/cni.sock"
	DefaultTimeout = 3*time.Minute + 30*time.Second
)

// DefaultNetnsPaths are the network namespace paths runtimes use: containerd
// and CRI-O bind-mount sandboxes under /var/run/netns (a symlink to
// /run/netns on most hosts); others pass /proc/<pid>/ns/net.
var DefaultNetnsPaths = []string{"/var/run/netns/*", "/run/netns/*", "/proc/[0-9]*/ns/net"}

// Conf is meshnet's plugin configuration in the conflist:
//
//	{"type": "meshnet", "socket": "/run/meshnet/cni.sock"}
type Conf struct {
	types.PluginConf
	// Socket is meshnetd's unix socket.
	Socket string `json:"socket,omitempty"`
	// NetnsPaths are the globs (filepath.Match) a CNI_NETNS must match;
	// DefaultNetnsPaths when empty.
	NetnsPaths []string `json:"netnsPaths,omitempty"`
	// Timeout bounds one call to meshnetd, as a Go duration; DefaultTimeout
	// when empty.
	Timeout string `json:"timeout,omitempty"`

	timeout time.Duration
	// rawPrevResult is the previous plugin's result exactly as it came.
	rawPrevResult json.RawMessage
}

// ParseConf decodes and checks the plugin configuration from stdin.
func ParseConf(stdin []byte) (*Conf, error) {
	c := &Conf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshnet: decode network configuration", err.Error())
	}
	var raw struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(stdin, &raw); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshnet: decode network configuration", err.Error())
	}
	if c.Type != "" && c.Type != "meshnet" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("meshnet: plugin type %q, want meshnet", c.Type), "")
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshnet: decode prevResult", err.Error())
	}
	if c.PrevResult != nil {
		c.rawPrevResult = raw.PrevResult
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if !filepath.IsAbs(c.Socket) {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("meshnet: socket %q is not an absolute path", c.Socket), "")
	}
	if len(c.NetnsPaths) == 0 {
		c.NetnsPaths = DefaultNetnsPaths
	}
	for _, p := range c.NetnsPaths {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("meshnet: netnsPaths entry %q", p), err.Error())
		}
	}
	c.timeout = DefaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("meshnet: timeout %q is not a positive duration", c.Timeout), "")
		}
		c.timeout = d
	}
	return c, nil
}

// CheckNetns accepts a CNI_NETNS that is a clean absolute path matching one
// of the configured globs. meshnetd opens it as a network namespace, so a
// path elsewhere (a file the runtime did not make) never reaches it.
func (c *Conf) CheckNetns(path string) error {
	if path == "" {
		return types.NewError(types.ErrInvalidNetNS, "meshnet: CNI_NETNS is not set", "")
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("meshnet: CNI_NETNS %q is not a clean absolute path", path), "")
	}
	for _, p := range c.NetnsPaths {
		if ok, _ := filepath.Match(p, path); ok && !strings.Contains(path, "..") {
			return nil
		}
	}
	return types.NewError(types.ErrInvalidNetNS,
		fmt.Sprintf("meshnet: CNI_NETNS %q is outside the network namespace paths %s", path, strings.Join(c.NetnsPaths, ", ")), "")
}

// podArgs are the CNI_ARGS a Kubernetes runtime sets.
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_UID       types.UnmarshallableString //nolint:revive // CNI_ARGS key
}

func parsePodArgs(args string) (namespace, name, uid string, err error) {
	a := podArgs{CommonArgs: types.CommonArgs{IgnoreUnknown: true}}
	if err := types.LoadArgs(args, &a); err != nil {
		return "", "", "", types.NewError(types.ErrInvalidEnvironmentVariables, "meshnet: parse CNI_ARGS", err.Error())
	}
	if a.K8S_POD_NAMESPACE == "" || a.K8S_POD_NAME == "" {
		return "", "", "", types.NewError(types.ErrInvalidEnvironmentVariables,
			"meshnet: CNI_ARGS lacks K8S_POD_NAMESPACE or K8S_POD_NAME: meshnet wires Kubernetes pods only", "")
	}
	return string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME), string(a.K8S_POD_UID), nil
}

// validAttachments reads the attachments GC must keep. Their absence is an
// error, not an empty list: an empty list tells meshnetd to tear down every
// pod of the network. Runtimes that followed the spec's first spelling send
// cni.dev/attachments instead.
func validAttachments(stdin []byte) ([]*meshnetv1.Attachment, error) {
	var raw struct {
		Valid    *[]types.GCAttachment `json:"cni.dev/valid-attachments"`
		Misspelt *[]types.GCAttachment `json:"cni.dev/attachments"`
	}
	if err := json.Unmarshal(stdin, &raw); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshnet: decode GC valid attachments", err.Error())
	}
	list := raw.Valid
	if list == nil {
		list = raw.Misspelt
	}
	if list == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "meshnet: GC without cni.dev/valid-attachments", "")
	}
	out := make([]*meshnetv1.Attachment, len(*list))
	for i, a := range *list {
		if a.ContainerID == "" {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("meshnet: GC valid attachment %d has no containerID", i), "")
		}
		out[i] = &meshnetv1.Attachment{ContainerId: a.ContainerID, Ifname: a.IfName}
	}
	return out, nil
}
