package cniplugin

import (
	"errors"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestCheckNetns(t *testing.T) {
	c, err := ParseConf([]byte(`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet"}`))
	if err != nil {
		t.Fatal(err)
	}
	for path, ok := range map[string]bool{
		"/var/run/netns/cni-1234":     true,
		"/run/netns/cni-1234":         true,
		"/proc/4242/ns/net":           true,
		"":                            false,
		"relative/netns":              false,
		"/tmp/netns":                  false,
		"/var/run/netns/../../etc/x":  false,
		"/var/run/netns/a/b":          false,
		"/proc/self/ns/net":           false,
		"/proc/4242/ns/mnt":           false,
		"/var/run/netns//cni-1234":    false,
		"/var/run/netns/cni-1234/":    false,
		"/var/run/netnsx/cni-1234":    false,
		"/proc/4242/root/run/netns/x": false,
		"/proc/4242/../4243/ns/net":   false,
	} {
		err := c.CheckNetns(path)
		if (err == nil) != ok {
			t.Errorf("CheckNetns(%q) = %v, want ok=%v", path, err, ok)
		}
		var cerr *types.Error
		if err != nil && (!errors.As(err, &cerr) || cerr.Code != types.ErrInvalidNetNS) {
			t.Errorf("CheckNetns(%q) = %v, want CNI code %d", path, err, types.ErrInvalidNetNS)
		}
	}
}

func TestParseConf(t *testing.T) {
	for _, c := range []struct {
		conf string
		code uint // 0: valid
	}{
		{`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet", "socket": "/run/x.sock", "timeout": "5s"}`, 0},
		{`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet",`, types.ErrDecodingFailure},
		{`{"cniVersion": "1.0.0", "name": "n", "type": "other"}`, types.ErrInvalidNetworkConfig},
		{`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet", "socket": "x.sock"}`, types.ErrInvalidNetworkConfig},
		{`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet", "timeout": "-1s"}`, types.ErrInvalidNetworkConfig},
		{`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet", "netnsPaths": ["["]}`, types.ErrInvalidNetworkConfig},
		{`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet", "prevResult": {"cniVersion": "1.0.0", "interfaces": "x"}}`, types.ErrDecodingFailure},
	} {
		_, err := ParseConf([]byte(c.conf))
		var cerr *types.Error
		switch {
		case c.code == 0 && err != nil:
			t.Errorf("%s: %v", c.conf, err)
		case c.code != 0 && (!errors.As(err, &cerr) || cerr.Code != c.code):
			t.Errorf("%s: %v, want CNI code %d", c.conf, err, c.code)
		}
	}
}

func TestPrevResultKeptVerbatim(t *testing.T) {
	prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}`
	c, err := ParseConf([]byte(`{"cniVersion": "1.0.0", "name": "n", "type": "meshnet", "prevResult": ` + prev + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.rawPrevResult) != prev {
		t.Errorf("prevResult %s, want %s", c.rawPrevResult, prev)
	}
}

func TestPodArgs(t *testing.T) {
	ns, name, uid, err := parsePodArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=lab;K8S_POD_NAME=r1;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1")
	if err != nil || ns != "lab" || name != "r1" || uid != "u-1" {
		t.Errorf("got %q %q %q %v", ns, name, uid, err)
	}
	if _, _, _, err := parsePodArgs("K8S_POD_NAMESPACE=lab"); err == nil {
		t.Error("args without K8S_POD_NAME accepted")
	}
}

func TestValidAttachments(t *testing.T) {
	for _, c := range []struct {
		conf string
		want []string // container ids; nil with code set
		code uint
	}{
		{`{"cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c2", "ifname": "eth0"}]}`, []string{"c1", "c2"}, 0},
		{`{"cni.dev/valid-attachments": []}`, []string{}, 0},
		{`{"cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}]}`, []string{"c1"}, 0},
		{`{}`, nil, types.ErrInvalidNetworkConfig},
		{`{"cni.dev/valid-attachments": null}`, nil, types.ErrInvalidNetworkConfig},
		{`{"cni.dev/valid-attachments": [{"ifname": "eth0"}]}`, nil, types.ErrInvalidNetworkConfig},
		{`{"cni.dev/valid-attachments": "c1"}`, nil, types.ErrDecodingFailure},
		{`{"cni.dev/valid-attachments": [{"containerID": 1}]}`, nil, types.ErrDecodingFailure},
	} {
		got, err := validAttachments([]byte(c.conf))
		var cerr *types.Error
		if c.code != 0 {
			if !errors.As(err, &cerr) || cerr.Code != c.code {
				t.Errorf("%s: %v, want CNI code %d", c.conf, err, c.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.conf, err)
			continue
		}
		ids := make([]string, len(got))
		for i, a := range got {
			ids[i] = a.GetContainerId()
		}
		if !slices.Equal(ids, c.want) || (len(got) > 0 && got[0].GetIfname() != "eth0") {
			t.Errorf("%s: %v, want %v", c.conf, got, c.want)
		}
	}
}
