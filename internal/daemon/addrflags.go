package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/pkg/api"
)

// addressFlags are the values of every sandboxd flag that names an address or a URL, as given.
// apply checks them all at start, before anything is made or served: each bad one is named with
// its value and what is wrong with it, all of them in one error.
type addressFlags struct {
	socket         string   // --socket PATH
	listen         string   // --listen HOST:PORT
	sshListen      string   // --ssh-listen HOST:PORT
	gatewayResolve []string // --gateway-resolve HOST:PORT=ADDR:PORT
	providerURLs   []string // --provider-url NAME=URL
}

// apply checks every address flag and fills cfg with what they parse to. The error joins one
// line per bad flag.
func (a addressFlags) apply(cfg *Config) error {
	var errs []error
	if a.socket == "" {
		errs = append(errs, errors.New(`invalid --socket "": give the path of the API's unix socket`))
	}
	cfg.Socket = a.socket
	if a.listen != "" {
		errs = append(errs, checkListenAddr("--listen", a.listen))
	}
	if a.sshListen != "" {
		errs = append(errs, checkListenAddr("--ssh-listen", a.sshListen))
	}
	cfg.Listen, cfg.SSHListen = a.listen, a.sshListen
	cfg.GatewayRoutes = nil
	for _, r := range a.gatewayResolve {
		route, err := gateway.ParseRoute(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("invalid --gateway-resolve: %w", err))
			continue
		}
		cfg.GatewayRoutes = append(cfg.GatewayRoutes, route)
	}
	var err error
	cfg.ProviderURLs, err = parseProviderURLs(a.providerURLs)
	errs = append(errs, err)
	return errors.Join(errs...)
}

// checkListenAddr checks the value of flag, a TCP address to listen on: HOST:PORT with a host,
// an IP address or a host name such as localhost (0.0.0.0 or [::] for every interface: an empty
// host, which would mean that too, must say so), and a port from 0 to 65535 written out, 0
// asking for any free port (tests do; the daemon logs the address it got, and the API reports
// the SSH endpoint's).
func checkListenAddr(flag, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("invalid %s %q: want HOST:PORT, e.g. 127.0.0.1:7777", flag, v)
	}
	var problems []string
	if host == "" {
		problems = append(problems, "no host: give one, e.g. 127.0.0.1, or 0.0.0.0 or [::] to listen on every interface")
	} else if _, err := netip.ParseAddr(host); err != nil && !api.IsHostName(host) {
		problems = append(problems, fmt.Sprintf("host %q is neither an IP address nor a host name", host))
	}
	if _, err := strconv.ParseUint(port, 10, 16); port == "" {
		problems = append(problems, "an empty port after ':': give one from 1 to 65535, or 0 for any free port")
	} else if err != nil {
		problems = append(problems, fmt.Sprintf("port %q: give one from 1 to 65535, or 0 for any free port", port))
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid %s %q: %s", flag, v, strings.Join(problems, "; "))
	}
	return nil
}
