// Package egress decides which addresses the host's outgoing connections
// (tool calls, fetched documents) may reach. The check runs in a net.Dialer
// Control function, on the address actually dialled after DNS resolution, so
// DNS rebinding and every redirect hop are covered.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// ErrPrivate is returned when a connection would reach a private, loopback,
// link-local or otherwise non-public address without permission.
var ErrPrivate = errors.New("refusing to connect to a non-public address (set allowPrivateNetwork: true in the service's config to allow it)")

// ErrOwn is returned when a connection would reach the host's own API.
var ErrOwn = errors.New("refusing to connect to this cyrnel host's own API")

// nonPublic are the special-purpose ranges (RFC 6890 and successors) beyond
// what netip's predicates cover: a public service never lives there.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	// IPv6 forms that carry an IPv4 address elsewhere than NAT64's last 32
	// bits: IPv4-compatible, SIIT, 6to4, Teredo, and NAT64's local prefix
	// (whose address is split around the u octet).
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// embedsIPv4 are IPv6 ranges whose last 32 bits are an IPv4 address the
// packet ends up at (NAT64), judged as that address.
var embedsIPv4 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
}

// Public reports whether ip is a public unicast address.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range embedsIPv4 {
		if p.Contains(ip) {
			b := ip.As16()
			ip = netip.AddrFrom4([4]byte(b[12:]))
		}
	}
	if !ip.IsGlobalUnicast() || ip.IsPrivate() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// Guard holds the host's own listen addresses, refused to every outgoing
// connection. The zero value refuses only non-public addresses.
type Guard struct {
	mu  sync.RWMutex
	own []netip.AddrPort
}

// AddOwn records an address the host listens on.
func (g *Guard) AddOwn(addr net.Addr) error {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return fmt.Errorf("egress: own address %q: %w", addr, err)
	}
	g.mu.Lock()
	g.own = append(g.own, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	g.mu.Unlock()
	return nil
}

// Check says whether a connection to addr may be made.
func (g *Guard) Check(addr netip.AddrPort, allowPrivate bool) error {
	ip := addr.Addr().Unmap().WithZone("")
	if g.isOwn(ip, addr.Port()) {
		return fmt.Errorf("%s: %w", addr, ErrOwn)
	}
	if !allowPrivate && !Public(ip) {
		return fmt.Errorf("%s: %w", addr, ErrPrivate)
	}
	return nil
}

// isOwn reports whether ip:port reaches one of the host's listeners: the
// same port on the listener's address, on loopback, or on any address of
// this machine when the listener is on all of them.
func (g *Guard) isOwn(ip netip.Addr, port uint16) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, o := range g.own {
		if o.Port() != port {
			continue
		}
		if ip == o.Addr() || ip.IsLoopback() || ip.IsUnspecified() || localAddr(ip) {
			return true
		}
	}
	return false
}

// localAddr reports whether ip is an address of one of this machine's
// interfaces. Read at each dial: interfaces come and go.
func localAddr(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse rather than risk reaching ourselves
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// Dialer returns a dialer whose every connection is checked by g.
func (g *Guard) Dialer(allowPrivate bool) *net.Dialer {
	return &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress: address %q: %w", address, err)
			}
			return g.Check(ap, allowPrivate)
		},
	}
}
