package clabfile

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ports maps a node's ports (docker's -p: [ip:]hostPort:containerPort[/proto],
// containerPort alone publishing it on a port of docker's choosing) to
// the ports of a Service named like the pod: where docker publishes a
// port on its host, the Service gives it a name in the cluster
// (<pod>.<namespace>.svc:hostPort), and kubectl port-forward svc/<pod>
// brings it to a user's machine. A host address has no counterpart and is
// ignored, saying so.
func (p *parser) ports(n *node) {
	for _, it := range n.chain.list("ports") {
		spec, proto, _ := strings.Cut(strings.TrimSpace(it.value), "/")
		parts := strings.Split(spec, ":")
		if len(parts) == 3 {
			if _, err := netip.ParseAddr(strings.Trim(parts[0], "[]")); err != nil && parts[0] != "" {
				p.errorf("%s: %q: %q is not an address", n.where(it.at), it.value, parts[0])
				continue
			}
			if parts[0] != "" {
				p.ignore(it.at, "a port is published on the containerlab host's address; here it is the Service's, in the cluster")
			}
			parts = parts[1:]
		}
		var host, container string
		switch len(parts) {
		case 1:
			host, container = parts[0], parts[0]
		case 2:
			host, container = parts[0], parts[1]
		default:
			p.errorf("%s: %q: want [address:]port:container-port[/tcp|udp|sctp]", n.where(it.at), it.value)
			continue
		}
		hp, herr := strconv.ParseUint(host, 10, 16)
		cp, cerr := strconv.ParseUint(container, 10, 16)
		if herr != nil || cerr != nil || hp == 0 || cp == 0 {
			p.errorf("%s: %q: ports are numbers from 1 to 65535 (ranges are not mapped)", n.where(it.at), it.value)
			continue
		}
		var protocol corev1.Protocol
		switch strings.ToLower(proto) {
		case "", "tcp":
			protocol = corev1.ProtocolTCP
		case "udp":
			protocol = corev1.ProtocolUDP
		case "sctp":
			protocol = corev1.ProtocolSCTP
		default:
			p.errorf("%s: %q: protocol %q: want tcp, udp or sctp", n.where(it.at), it.value, proto)
			continue
		}
		n.ports = append(n.ports, corev1.ServicePort{
			Name:       fmt.Sprintf("%s-%d", strings.ToLower(string(protocol)), hp),
			Protocol:   protocol,
			Port:       int32(hp),
			TargetPort: intstr.FromInt32(int32(cp)),
		})
	}
}

// service is node n's Service, nil when it publishes no port: its ports,
// selecting its pod by the lab's and the node's labels.
func (l *Lab) service(n *node, namespace string) *corev1.Service {
	if len(n.ports) == 0 {
		return nil
	}
	sel := map[string]string{LabLabel: l.Name, NodeLabel: n.name}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: n.pod, Namespace: namespace, Labels: sel},
		Spec:       corev1.ServiceSpec{Selector: sel, Ports: n.ports},
	}
}
