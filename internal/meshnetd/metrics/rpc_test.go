package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRPCHistogram(t *testing.T) {
	r := NewRPC()
	unary := r.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/meshnet.v1.LinkService/SetNetem"}
	for _, err := range []error{nil, nil, status.Error(codes.Unauthenticated, "no token")} {
		unary(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, err })
	}
	stream := r.StreamServerInterceptor()
	stream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"},
		func(any, grpc.ServerStream) error { return nil })
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	if n := testutil.CollectAndCount(r); n != 3 {
		t.Fatalf("%d series, want 3 (method x code)", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, m := range mfs[0].GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		counts[strings.Join(labels, ",")] = m.GetHistogram().GetSampleCount()
	}
	for k, n := range map[string]uint64{
		"code=OK,method=/meshnet.v1.LinkService/SetNetem":                          2,
		"code=Unauthenticated,method=/meshnet.v1.LinkService/SetNetem":             1,
		"code=OK,method=/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": 1,
	} {
		if counts[k] != n {
			t.Errorf("%s: %d calls, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
}
