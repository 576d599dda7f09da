//go:build kernel

package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestKernelInterfacesAreChargedToTheirMaker makes 1,000 veth pairs from a
// process in a memory cgroup of the test's, and reads that cgroup's kernel
// memory as meshnetd reads its own: the kernel charges the interfaces to the
// cgroup of the process that made them, which for the pods' interfaces is
// meshnetd's container, so its Go memory limit must leave room for them.
func TestKernelInterfacesAreChargedToTheirMaker(t *testing.T) {
	const pairs = 1000
	name := fmt.Sprintf("meshnet-kmem-test-%d", os.Getpid())
	var dir, self string
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		dir, self = filepath.Join(cgroupRoot, name), "0::/"+name+"\n"
	} else {
		dir, self = filepath.Join(cgroupRoot, "memory", name), "5:memory:/"+name+"\n"
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("make a memory cgroup: %v", err)
	}
	netns := name
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", netns).Run()
		for try := 0; try < 50; try++ {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("remove cgroup %s", dir)
	})
	before, err := kernelMemory([]byte(self), cgroupRoot)
	if err != nil {
		t.Fatalf("kernel memory of a new cgroup: %v", err)
	}
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && ip netns add %s && for i in $(seq 1 %d); do echo "link add v$i type veth peer name p$i"; done | ip -n %s -batch -`,
		dir, netns, pairs, netns)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("make %d veth pairs from the cgroup: %v\n%s", pairs, err, out)
	}
	after, err := kernelMemory([]byte(self), cgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	per := (after - before) / (2 * pairs)
	t.Logf("%d interfaces made from the cgroup: its kernel memory %d -> %d bytes, %d KiB an interface", 2*pairs, before, after, per>>10)
	// Each interface holds at least its net_device, its queues and its
	// sysfs entries: several KiB.
	if per < 4<<10 {
		t.Errorf("kernel memory charged %d bytes an interface, want several KiB: is it read from the right cgroup?", per)
	}
}
