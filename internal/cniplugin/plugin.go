// Package cniplugin is meshnet's CNI plugin, chained after the cluster's
// primary CNI. It is thin: each command is forwarded to the node's meshnetd
// over its unix socket, and meshnetd's error is returned as is. It never
// touches the primary's interface and passes prevResult through unchanged.
// When meshnetd cannot be reached ADD fails (CNI code 11, try again later):
// a topology pod never starts without its links.
package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// HealthService is the name meshnetd's health server reports the CNI
// service under; STATUS asks for it.
const HealthService = "meshnet.v1.CNIService"

// Funcs are the plugin's CNI commands, for skel.PluginMainFuncs.
func Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: Add, Del: Del, Check: Check, Status: Status, GC: GC}
}

// Add forwards CNI ADD to meshnetd and prints prevResult.
func Add(args *skel.CmdArgs) error {
	c, err := ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := c.CheckNetns(args.Netns); err != nil {
		return err
	}
	pod, uid, err := podRef(args.Args)
	if err != nil {
		return err
	}
	err = c.call(func(ctx context.Context, cl meshnetv1.CNIServiceClient) error {
		_, err := cl.SetupPod(ctx, &meshnetv1.SetupPodRequest{Cni: c.cniContext(args), Pod: pod, PodUid: uid})
		return err
	})
	if err != nil {
		return err
	}
	return c.printResult()
}

// Del forwards CNI DEL to meshnetd. CNI_NETNS may be empty (the sandbox is
// gone); one that is set must still be a valid path.
func Del(args *skel.CmdArgs) error {
	c, err := ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	if args.Netns != "" {
		if err := c.CheckNetns(args.Netns); err != nil {
			return err
		}
	}
	pod, uid, err := podRef(args.Args)
	if err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl meshnetv1.CNIServiceClient) error {
		_, err := cl.TeardownPod(ctx, &meshnetv1.TeardownPodRequest{Cni: c.cniContext(args), Pod: pod, PodUid: uid})
		return err
	})
}

// Check forwards CNI CHECK to meshnetd.
func Check(args *skel.CmdArgs) error {
	c, err := ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := c.CheckNetns(args.Netns); err != nil {
		return err
	}
	pod, uid, err := podRef(args.Args)
	if err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl meshnetv1.CNIServiceClient) error {
		_, err := cl.CheckPod(ctx, &meshnetv1.CheckPodRequest{Cni: c.cniContext(args), Pod: pod, PodUid: uid})
		return err
	})
}

// Status (CNI 1.1) reports whether meshnetd is serving: the runtime holds
// back new pods while it is not.
func Status(args *skel.CmdArgs) error {
	c, err := ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: HealthService})
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("meshnet: meshnetd on %s is not reachable", c.Socket), status.Convert(err).Message())
	}
	if res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("meshnet: meshnetd on %s is %s", c.Socket, res.GetStatus()), "")
	}
	return nil
}

// GC (CNI 1.1) hands meshnetd the runtime's valid attachments: it tears
// down, as DEL would, every pod it wired for this network whose sandbox is
// not among them.
func GC(args *skel.CmdArgs) error {
	c, err := ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	valid, err := validAttachments(args.StdinData)
	if err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl meshnetv1.CNIServiceClient) error {
		_, err := cl.GarbageCollect(ctx, &meshnetv1.GarbageCollectRequest{Network: c.Name, CniVersion: c.CNIVersion, ValidAttachments: valid})
		return err
	})
}

func podRef(cniArgs string) (*meshnetv1.PodRef, string, error) {
	ns, name, uid, err := parsePodArgs(cniArgs)
	if err != nil {
		return nil, "", err
	}
	return &meshnetv1.PodRef{Namespace: ns, Name: name}, uid, nil
}

func (c *Conf) cniContext(args *skel.CmdArgs) *meshnetv1.CNIContext {
	return &meshnetv1.CNIContext{
		ContainerId: args.ContainerID,
		Netns:       args.Netns,
		Ifname:      args.IfName,
		CniVersion:  c.CNIVersion,
		Network:     c.Name,
	}
}

// dial connects lazily; a missing socket is reported at once, by name.
func (c *Conf) dial() (*grpc.ClientConn, error) {
	if _, err := os.Stat(c.Socket); err != nil {
		return nil, types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("meshnet: meshnetd is not running on this node: no socket %s", c.Socket), err.Error())
	}
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf("meshnet: connect to meshnetd on %s", c.Socket), err.Error())
	}
	return conn, nil
}

// call runs one RPC and turns a failure into a CNI error carrying
// meshnetd's message unchanged.
func (c *Conf) call(rpc func(context.Context, meshnetv1.CNIServiceClient) error) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	err = rpc(ctx, meshnetv1.NewCNIServiceClient(conn))
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("meshnet: meshnetd on %s: %s", c.Socket, st.Message()), "")
	case codes.DeadlineExceeded:
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("meshnet: meshnetd on %s did not answer within %v", c.Socket, c.timeout), st.Message())
	case codes.InvalidArgument:
		return types.NewError(types.ErrInvalidNetworkConfig, "meshnet: "+st.Message(), "")
	}
	return types.NewError(types.ErrInternal, "meshnet: "+st.Message(), "")
}

// printResult writes the previous plugin's result exactly as received, or
// an empty result when meshnet is alone in its chain.
func (c *Conf) printResult() error {
	if c.rawPrevResult != nil {
		if _, err := os.Stdout.Write(c.rawPrevResult); err != nil {
			return fmt.Errorf("meshnet: write result: %w", err)
		}
		return nil
	}
	if c.CNIVersion == "" {
		return errors.New("meshnet: no cniVersion in the network configuration")
	}
	return types.PrintResult(&current.Result{CNIVersion: current.ImplementedSpecVersion}, c.CNIVersion)
}
