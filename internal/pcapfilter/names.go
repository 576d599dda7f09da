package pcapfilter

// portProtos says over which transports a service name is known.
type portProtos uint8

const (
	overTCP portProtos = 1 << iota
	overUDP
	overBoth = overTCP | overUDP
)

type service struct {
	port   uint16
	protos portProtos
}

// services are the port names Compile knows, as Debian's /etc/services
// (netbase) lists them: libpcap looks a name up for TCP and for UDP, and a
// name listed for TCP only (ssh, http, bgp) filters TCP only, a name listed
// for UDP only (ntp, bootps) UDP only, and a name listed for both with one
// number TCP, UDP and SCTP. The kernel differential test checks each entry
// against libpcap.
var services = map[string]service{
	"echo":          {7, overBoth},
	"discard":       {9, overBoth},
	"daytime":       {13, overBoth},
	"ftp-data":      {20, overTCP},
	"ftp":           {21, overTCP},
	"ssh":           {22, overTCP},
	"telnet":        {23, overTCP},
	"smtp":          {25, overTCP},
	"time":          {37, overBoth},
	"domain":        {53, overBoth},
	"bootps":        {67, overUDP},
	"bootpc":        {68, overUDP},
	"tftp":          {69, overUDP},
	"finger":        {79, overTCP},
	"http":          {80, overTCP},
	"www":           {80, overTCP},
	"kerberos":      {88, overBoth},
	"pop3":          {110, overTCP},
	"sunrpc":        {111, overBoth},
	"auth":          {113, overTCP},
	"nntp":          {119, overTCP},
	"ntp":           {123, overUDP},
	"netbios-ns":    {137, overUDP},
	"netbios-ssn":   {139, overTCP},
	"imap":          {143, overTCP},
	"imap2":         {143, overTCP},
	"snmp":          {161, overBoth},
	"snmp-trap":     {162, overBoth},
	"bgp":           {179, overTCP},
	"ldap":          {389, overBoth},
	"https":         {443, overBoth},
	"microsoft-ds":  {445, overTCP},
	"submissions":   {465, overTCP},
	"isakmp":        {500, overUDP},
	"syslog":        {514, overBoth},
	"router":        {520, overUDP},
	"dhcpv6-client": {546, overUDP},
	"dhcpv6-server": {547, overUDP},
	"rtsp":          {554, overBoth},
	"submission":    {587, overTCP},
	"ipp":           {631, overTCP},
	"ldaps":         {636, overBoth},
	"ldp":           {646, overBoth},
	"domain-s":      {853, overBoth},
	"rsync":         {873, overTCP},
	"imaps":         {993, overTCP},
	"pop3s":         {995, overTCP},
	"socks":         {1080, overTCP},
	"openvpn":       {1194, overBoth},
	"ms-sql-s":      {1433, overTCP},
	"l2tp":          {1701, overUDP},
	"radius":        {1812, overBoth},
	"radius-acct":   {1813, overBoth},
	"nfs":           {2049, overBoth},
	"iscsi-target":  {3260, overTCP},
	"mysql":         {3306, overTCP},
	"ipsec-nat-t":   {4500, overUDP},
	"sip":           {5060, overBoth},
	"sip-tls":       {5061, overBoth},
	"mdns":          {5353, overUDP},
	"postgresql":    {5432, overTCP},
	"x11":           {6000, overTCP},
	"redis":         {6379, overTCP},
	"http-alt":      {8080, overTCP},
}

// ipProtocols are the IP protocol names of Debian's /etc/protocols that
// "ip proto NAME", "ip6 proto NAME" and "proto NAME" take. A name that is
// also a keyword (tcp, udp, icmp, ...) must be escaped: "ip proto \tcp".
var ipProtocols = map[string]uint32{
	"ip":         0,
	"hopopt":     0,
	"icmp":       1,
	"igmp":       2,
	"ipencap":    4,
	"tcp":        6,
	"egp":        8,
	"igp":        9,
	"udp":        17,
	"dccp":       33,
	"ipv6":       41,
	"ipv6-route": 43,
	"ipv6-frag":  44,
	"rsvp":       46,
	"gre":        47,
	"esp":        50,
	"ah":         51,
	"ipv6-icmp":  58,
	"ipv6-nonxt": 59,
	"ipv6-opts":  60,
	"eigrp":      88,
	"ospf":       89,
	"ipip":       94,
	"etherip":    97,
	"pim":        103,
	"ipcomp":     108,
	"vrrp":       112,
	"l2tp":       115,
	"isis":       124,
	"sctp":       132,
	"udplite":    136,
	"mpls-in-ip": 137,
}

// etherProtocols are the names "ether proto NAME" takes (libpcap's
// eproto_db and llc_db, less AppleTalk and IPX, whose tests Compile does
// not generate). Keywords must be escaped: "ether proto \arp".
var etherProtocols = map[string]uint32{
	"arp":      0x0806,
	"decnet":   0x6003,
	"ip":       0x0800,
	"ip6":      0x86dd,
	"lat":      0x6004,
	"loopback": 0x9000,
	"mopdl":    0x6001,
	"moprc":    0x6002,
	"rarp":     0x8035,
	"sca":      0x6007,
	"iso":      0xfe,
	"stp":      0x42,
	"netbeui":  0xf0,
}
