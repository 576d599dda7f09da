package clabfile

import (
	"fmt"
	"strings"
)

// How the exec hook runs (the package doc says why): its script, in the
// ConfigMap <node>-exec, is mounted in execDir; it marks each command done
// in execStateDir, an emptyDir; it waits up to execWait seconds for the
// node's link interfaces.
const (
	execDir      = runDir + "/exec"
	execScript   = "exec.sh"
	execStateDir = runDir + "/done"
	execWait     = 300
)

// command is one exec command of a node.
type command struct {
	// at is where the file sets it, text the command with containerlab's
	// variables replaced, argv its words.
	at   string
	text string
	argv []string
}

// exec resolves a node's exec commands: those of defaults, kind, group and
// node in that order, exact duplicates dropped, each split into words as
// containerlab splits it, with the node's and lab's names replaced.
func (p *parser) exec(n *node) {
	names := strings.NewReplacer(varNodeName, n.name, varLabName, "clab-"+p.lab.Name)
	for _, it := range n.chain.list("exec") {
		text := names.Replace(it.value)
		if strings.Contains(text, varLabDir) || strings.Contains(text, varNodeDir) {
			p.errorf("%s: %q: not supported: it names containerlab's lab directory on its host, which a pod does not have", n.where(it.at), it.value)
			continue
		}
		argv, err := splitWords(text)
		switch {
		case err != nil:
			p.errorf("%s: %q: %v", n.where(it.at), it.value, err)
		case len(argv) == 0:
			p.errorf("%s: %q: empty command", n.where(it.at), it.value)
		default:
			n.exec = append(n.exec, command{at: it.at, text: text, argv: argv})
		}
	}
}

// ExecFailed starts the line an exec command that failed writes to its
// container's log (and to the hook's output): "containerlab exec on node
// host1: topology.nodes.host1.exec[1] "ip addr add ..." failed with exit
// status 2", as containerlab logs a failing command of a node's exec.
const ExecFailed = "containerlab exec on node "

// execLog is where the hook reports a failed command for kubectl logs:
// the standard error of the container's first process.
const execLog = "/proc/1/fd/2"

// execHookScript is the shell script of node n's postStart hook: it waits
// for the node's link interfaces, then runs each command not run yet, as
// a program (exec, no shell), in order, every one of them as containerlab
// does: a command that fails is reported on the container's log (PID 1's
// standard error, which kubectl logs shows) and the next runs. The hook
// succeeds, so the kubelet does not restart the container. Each command
// is marked run in the state directory, so that a container that restarts
// (same pod) runs none of them again.
func (n *node) execHookScript() string {
	var b strings.Builder
	fmt.Fprintf(&b, `# containerlab exec of node %s, run by its pod's postStart hook:
# wait for the node's links, then run each command once per pod, in
# order, marking it run in %s; a command that fails is
# reported on the container's log, and the next runs.
node=%s
`, n.name, execStateDir, shellQuote(n.name))
	if len(n.intfs) > 0 {
		fmt.Fprintf(&b, `for intf in %s; do
  waited=0
  while [ ! -e "/sys/class/net/$intf" ]; do
    if [ "$waited" -ge %d ]; then
      echo "containerlab exec on node $node: interface $intf did not appear in %d s; no command ran" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
done
`, quoteAll(n.intfs), execWait, execWait)
	}
	fmt.Fprintf(&b, `clab_exec() {
  mark="%s/$1" what=$2
  shift 2
  [ -e "$mark" ] && return 0
  ( exec "$@" )
  status=$?
  : >"$mark"
  if [ "$status" -ne 0 ]; then
    msg="%s$node: $what failed with exit status $status"
    echo "$msg" >&2
    echo "$msg" 2>/dev/null >>%s
  fi
  return 0
}
`, execStateDir, ExecFailed, execLog)
	for i, c := range n.exec {
		fmt.Fprintf(&b, "clab_exec %d %s %s\n", i, shellQuote(fmt.Sprintf("%s %q", c.at, c.text)), quoteAll(c.argv))
	}
	return b.String()
}

// shellQuote quotes s as one word of a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}
