package kubecluster

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/teardown"
)

// netns creates the network namespace <prefix><name>; Close deletes it.
func (c *Cluster) netns(name string) (string, error) {
	return teardown.AddNetns(&c.undo, c.opts.Prefix+name)
}

// run runs argv and returns its output in the error when it fails.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// process is a program of the cluster, logging to a file of its own, and
// started again when it dies, as systemd restarts a node's kubelet,
// containerd and kube-proxy (Restart=always): a killed kubelet comes back,
// as on a real node.
type process struct {
	name    string
	logFile string
	argv    []string
	c       *Cluster
	// exited is closed once the program is down for good: stopped, or
	// given up on after crashing at start again and again.
	exited chan struct{}
	stopc  chan struct{} // closed by stop

	mu       sync.Mutex
	cmd      *exec.Cmd // the running one, or the last
	running  bool      // cmd has not exited
	stopping bool
}

// Restarts of a program that dies: after restartDelay; but a program that
// dies within startLimitWindow of its start startLimitBurst times in a row is
// left down, as systemd's start limit leaves it (a broken configuration
// would crash forever).
const (
	restartDelay     = time.Second
	startLimitWindow = 10 * time.Second
	startLimitBurst  = 5
)

// start starts argv, inside the namespaces named by ns ("" for the host's;
// "NET" or "NET|MNT" for a network and a mount namespace's files), and
// keeps it running until stop.
func (c *Cluster) start(name, ns string, argv ...string) (*process, error) {
	dir := filepath.Join(c.opts.Dir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if ns != "" {
		netNS, mntNS, _ := strings.Cut(ns, "|")
		pre := []string{"nsenter", "--net=" + netNS}
		if mntNS != "" {
			pre = append(pre, "--mount="+mntNS)
		}
		argv = append(append(pre, "--"), argv...)
	}
	p := &process{name: name, logFile: filepath.Join(dir, name+".log"), argv: argv, c: c,
		exited: make(chan struct{}), stopc: make(chan struct{})}
	cmd, err := p.run()
	if err != nil {
		return nil, err
	}
	go p.supervise(cmd)
	return p, nil
}

// run starts the program once.
func (p *process) run() (*exec.Cmd, error) {
	logf, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a terminal's ^C reaches the cluster, which
	// stops its programs in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd, p.running = cmd, true
	p.mu.Unlock()
	p.c.log.Debug("started", "process", p.name, "pid", cmd.Process.Pid, "log", p.logFile)
	return cmd, nil
}

// supervise waits for cmd and starts the program again when it died
// unasked, until stop or the start limit.
func (p *process) supervise(cmd *exec.Cmd) {
	defer close(p.exited)
	quick := 0 // deaths in a row within startLimitWindow of their start
	for restarts := 1; ; restarts++ {
		started := time.Now()
		_ = cmd.Wait()
		p.mu.Lock()
		p.running = false
		stopping := p.stopping
		p.mu.Unlock()
		if stopping {
			return
		}
		if time.Since(started) < startLimitWindow {
			quick++
		} else {
			quick = 0
		}
		if quick >= startLimitBurst {
			p.c.log.Error("died at start too often; left down", "process", p.name, "status", cmd.ProcessState.String(), "log", p.logFile)
			return
		}
		p.c.log.Warn("died; starting it again", "process", p.name, "status", cmd.ProcessState.String(), "in", restartDelay, "restart", restarts, "log", p.logFile)
		select {
		case <-p.stopc:
			return
		case <-time.After(restartDelay):
		}
		next, err := p.run()
		if err != nil {
			p.c.log.Error("restart failed; left down", "process", p.name, "error", err)
			return
		}
		cmd = next
	}
}

// pid is the running program's process ID; 0 while it is down.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return 0
	}
	return p.cmd.Process.Pid
}

// state is how the last run of the program ended, for errors.
func (p *process) state() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// stop sends SIGTERM and waits up to 20 s before killing; the program is
// not started again.
func (p *process) stop() error {
	p.mu.Lock()
	if !p.stopping {
		p.stopping = true
		close(p.stopc)
	}
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within 20s of SIGTERM; killed", p.name)
	}
}

func (p *process) log() string {
	data, _ := os.ReadFile(p.logFile)
	return string(data)
}

// privateMount makes dir a mount point of its own with private
// propagation, where namespace files can be bound.
func privateMount(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		return errors.Join(fmt.Errorf("make %s private: %w", dir, err), unmount(dir))
	}
	return nil
}

// unmount detaches a mount, ignoring a path that is no mount point.
func unmount(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// nsInode is the inode of a namespace file, what /proc/PID/ns/* compare by.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// killNode kills every process left of a node: those in its mount
// namespace (containerd's shims), in its network namespace (hostNetwork
// containers) and in its pods' network namespaces, until none is left.
func killNode(n *Node) error {
	inodes := map[uint64]bool{}
	for _, p := range []string{n.MountNS, n.Netns} {
		if p == "" {
			continue
		}
		if ino, err := nsInode(p); err == nil {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	for try := 0; ; try++ {
		// Pods' namespaces are found through their processes: a process
		// whose parent is one of the node's shims belongs to the node.
		pids := nodeProcesses(inodes)
		if len(pids) == 0 {
			return nil
		}
		if try == 50 {
			return fmt.Errorf("processes of node %s still running after 5s of SIGKILL: %v", n.Name, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeProcesses lists the processes in one of the namespaces in inodes,
// and their descendants.
func nodeProcesses(inodes map[uint64]bool) []int {
	roots := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, ns := range []string{"mnt", "net"} {
			if ino, err := nsInode(fmt.Sprintf("/proc/%d/ns/%s", pid, ns)); err == nil && inodes[ino] {
				roots[pid] = true
			}
		}
	}
	return descendants(roots)
}

// cgroupRoots are the cgroup v1 hierarchies (and v2's unified one) where
// runc puts a node's containers.
func cgroupRoots() []string {
	matches, _ := filepath.Glob("/sys/fs/cgroup/*")
	return matches
}

// removeCgroups removes the cgroups of the node's containers: the
// directories named in its kubelet's pods' sandboxes, found as cgroups
// whose path contains the node's container ids. Empty ones only: a
// cgroup with a process left cannot be removed, and says so.
func removeCgroups(n *Node) error {
	ids := map[string]bool{}
	tasks, _ := filepath.Glob(filepath.Join(n.Dir, "containerd", "state", "io.containerd.runtime.v2.task", "*", "*"))
	for _, t := range tasks {
		ids[filepath.Base(t)] = true
	}
	if len(ids) == 0 {
		return nil
	}
	var errs []error
	for _, root := range cgroupRoots() {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || path == root {
				return nil
			}
			if ids[filepath.Base(path)] {
				if err := removeTree(path); err != nil {
					errs = append(errs, err)
				}
				return filepath.SkipDir
			}
			return nil
		})
	}
	return errors.Join(errs...)
}

// removeTree removes a cgroup directory and the cgroups below it, deepest
// first (cgroupfs removes only empty cgroups, with rmdir).
func removeTree(path string) error {
	var dirs []string
	_ = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// sharedCgroupParent is where containerd puts every container of a node
// whose kubelet runs without QoS cgroups: /k8s.io in each hierarchy.
const sharedCgroupParent = "k8s.io"

// removeSharedCgroupParent removes /k8s.io from every hierarchy where it
// is empty; another runtime's containers keep it (rmdir fails, ignored).
func removeSharedCgroupParent() error {
	for _, root := range cgroupRoots() {
		_ = syscall.Rmdir(filepath.Join(root, sharedCgroupParent))
	}
	return nil
}

// Leftovers lists what a cluster whose state was in dir and whose
// namespaces were named with prefix left on the machine: namespaces, the
// host's interface, mounts and processes naming dir, containers' cgroups,
// and dir itself. Empty after a clean Close.
func Leftovers(dir, prefix string) []string {
	var left []string
	for _, name := range teardown.Netns(prefix) {
		left = append(left, "network namespace "+name)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", hostNIC)); err == nil {
		left = append(left, "interface "+hostNIC)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, dir) {
				left = append(left, "mount "+line)
			}
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil || p.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(string(cmdline), dir) {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	for _, root := range cgroupRoots() {
		sub, _ := os.ReadDir(filepath.Join(root, sharedCgroupParent))
		for _, s := range sub {
			if s.IsDir() {
				left = append(left, "cgroup "+filepath.Join(root, sharedCgroupParent, s.Name()))
			}
		}
	}
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "directory "+dir)
	}
	return left
}

// HostPaths are the paths on the host where nodes mount their own
// directories; a cluster makes those missing and removes them again.
func HostPaths() []string { return slices.Sorted(maps.Keys(hostPaths)) }

// Sweep removes what a cluster killed before its Close left (state in dir,
// namespaces named with prefix): its processes and their containers, the
// mounts under dir, the namespaces (and so the host's interface) and the
// containers' cgroups that are empty. It returns what it removed.
func Sweep(dir, prefix string) ([]string, error) {
	if prefix == "" || dir == "" {
		return nil, fmt.Errorf("sweep: an empty prefix or directory would match everything")
	}
	var removed []string
	var errs []error
	// Processes started with dir in their command line (containerd, its
	// shims, kubelet, kube-proxy) and everything below them.
	roots := map[int]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); strings.Contains(string(cmdline), dir) {
			roots[pid] = true
		}
	}
	if len(roots) > 0 {
		for try := 0; try < 50; try++ {
			pids := descendants(roots)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(100 * time.Millisecond)
		}
		removed = append(removed, fmt.Sprintf("%d processes", len(roots)))
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
				mounts = append(mounts, f[4])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			if err := unmount(mounts[i]); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, "mount "+mounts[i])
			}
		}
	}
	gone, err := teardown.SweepNetns(prefix)
	removed = append(removed, gone...)
	if err != nil {
		errs = append(errs, err)
	}
	// The host's interface went with the fabric namespace (its veth peer);
	// one of another cluster is left alone.
	for _, root := range cgroupRoots() {
		sub, _ := os.ReadDir(filepath.Join(root, sharedCgroupParent))
		for _, s := range sub {
			if s.IsDir() && removeTree(filepath.Join(root, sharedCgroupParent, s.Name())) == nil {
				removed = append(removed, "cgroup "+filepath.Join(root, sharedCgroupParent, s.Name()))
			}
		}
	}
	_ = removeSharedCgroupParent()
	return removed, errors.Join(errs...)
}

// descendants are the live processes in roots and below them.
func descendants(roots map[int]bool) []int {
	procs, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var all []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		all = append(all, pid)
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
				if f := strings.Fields(string(stat)[i+1:]); len(f) > 1 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	var out []int
	for _, pid := range all {
		for p := pid; p > 1; p = parent[p] {
			if roots[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
