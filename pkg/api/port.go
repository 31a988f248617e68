package api

import "strconv"

// A port stream carries one TCP connection to a port on a sandbox's loopback over the API, the
// way `hiloop sandbox port-forward` uses it: GET /v1/sandboxes/{name}/ports/{port} with
// "Connection: Upgrade" and "Upgrade: tcp". The daemon connects to the port first (127.0.0.1,
// then ::1), so that a port nothing listens on is a plain HTTP error (port_not_listening); then
// it answers 101 Switching Protocols and the connection carries the stream's bytes both ways,
// unframed, each direction ending with a half-close of the other.

// PortUpgrade is the Upgrade token of a port stream.
const PortUpgrade = "tcp"

// ParsePort reads a port number, 1 to 65535, from a path or a command line.
func ParsePort(what, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, Errorf(CodeInvalidArgument, "invalid %s %q: use 1 to 65535", what, s)
	}
	return n, nil
}
