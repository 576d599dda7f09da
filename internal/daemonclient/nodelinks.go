package daemonclient

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/partition"
)

// LinkLister is LinkService's ListLinks as its server implements it.
type LinkLister interface {
	ListLinks(context.Context, *meshnetv1.ListLinksRequest) (*meshnetv1.ListLinksResponse, error)
}

// Daemons reads the link ends of a namespace's pods on a node from that
// node's meshnetd, for the data API (meshnetd) and the aggregated API's
// link listing (the controller): this node's LinkService in process, the
// others over gRPC at the address partition finds for them.
type Daemons struct {
	// Node is this daemon's node; Local its LinkService. With Local nil
	// every node, this one too, is asked over gRPC.
	Node  string
	Local LinkLister
	// Resolver finds a node's meshnetd (a partition.Resolver); Dial
	// returns the connection to its address (Pool's Conn, which keeps one
	// per address).
	Resolver partition.Finder
	Dial     func(addr string) (*grpc.ClientConn, error)
}

// NodeLinks reads the link ends of namespace's pods on node, with their
// kernel counters: that node's LinkService.ListLinks.
func (d *Daemons) NodeLinks(ctx context.Context, node, namespace string) ([]*meshnetv1.LinkStatus, error) {
	req := &meshnetv1.ListLinksRequest{Namespace: namespace}
	if node == d.Node && d.Local != nil {
		resp, err := d.Local.ListLinks(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("list links on this node: %w", err)
		}
		return resp.GetLinks(), nil
	}
	if d.Resolver == nil || d.Dial == nil {
		return nil, fmt.Errorf("no way to reach the meshnetd of node %s (no resolver)", node)
	}
	addr, err := d.Resolver.DaemonFor(ctx, node)
	if err != nil {
		return nil, err
	}
	conn, err := d.Dial(addr)
	if err != nil {
		return nil, err
	}
	resp, err := meshnetv1.NewLinkServiceClient(conn).ListLinks(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("list links on meshnetd %s of node %s: %w", addr, node, err)
	}
	return resp.GetLinks(), nil
}
