//go:build kernel

package podlinks_test

import (
	"context"
	"testing"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// BenchmarkKernelListLinks1000 lists a namespace of 1,000 link ends (200
// pods with 5 veth links each) over gRPC, read back from the kernel with
// counters. Target: 100 ms or less.
func BenchmarkKernelListLinks1000(b *testing.B) {
	lab := podlinkstest.NewLab(b)
	lab.Mesh(ns, 200, 5)
	st := podlinkstest.Start(b, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(b, "")
	ctx := context.Background()
	cpu := podlinkstest.CPU(b)
	for b.Loop() {
		resp, err := c.ListLinks(ctx, &meshnetv1.ListLinksRequest{Namespace: ns})
		if err != nil {
			b.Fatal(err)
		}
		if n := len(resp.GetLinks()); n != 1000 {
			b.Fatalf("%d links listed, want 1000", n)
		}
	}
	cpu()
}
