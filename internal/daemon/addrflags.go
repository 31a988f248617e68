package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
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
	insecureListen string   // --insecure-listen HOST:PORT
	tlsSANs        []string // --tls-san NAME|IP
	sshListen      string   // --ssh-listen HOST:PORT
	sshAdvertise   string   // --ssh-advertise HOST:PORT
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
	if a.insecureListen != "" {
		err := checkListenAddr("--insecure-listen", a.insecureListen)
		if err == nil && a.insecureListen == a.listen {
			err = fmt.Errorf("invalid --insecure-listen %q: --listen serves TLS there: give plain HTTP another address", a.insecureListen)
		}
		errs = append(errs, err)
	}
	cfg.TLSSANs = nil
	for _, v := range a.tlsSANs {
		san, err := checkTLSSAN(v)
		errs = append(errs, err)
		if err == nil && !slices.Contains(cfg.TLSSANs, san) {
			cfg.TLSSANs = append(cfg.TLSSANs, san)
		}
	}
	if len(a.tlsSANs) > 0 && a.listen == "" {
		errs = append(errs, errors.New("--tls-san without --listen: it names what the TLS listener's certificate is good for"))
	}
	if a.sshListen != "" {
		errs = append(errs, checkListenAddr("--ssh-listen", a.sshListen))
	}
	if a.sshAdvertise != "" {
		errs = append(errs, checkAdvertiseAddr(a.sshAdvertise))
		if a.sshListen == "" {
			errs = append(errs, errors.New("--ssh-advertise without --ssh-listen: the SSH endpoint is off"))
		}
	}
	cfg.Listen, cfg.InsecureListen, cfg.SSHListen, cfg.SSHAdvertise = a.listen, a.insecureListen, a.sshListen, a.sshAdvertise
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

// checkAdvertiseAddr checks --ssh-advertise, where clients on other machines connect: HOST:PORT
// with a host they can reach (an address meaning every interface is none) and a port from 1 to
// 65535.
func checkAdvertiseAddr(v string) error {
	const flag = "--ssh-advertise"
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("invalid %s %q: want HOST:PORT, e.g. sandboxd.example.com:2222", flag, v)
	}
	var problems []string
	if ip, err := netip.ParseAddr(host); host == "" {
		problems = append(problems, "no host: give the name or address clients connect to")
	} else if err == nil && ip.IsUnspecified() {
		problems = append(problems, fmt.Sprintf("host %q means every interface, which no client connects to: give the host's name or one of its addresses", host))
	} else if err != nil && !api.IsHostName(host) {
		problems = append(problems, fmt.Sprintf("host %q is neither an IP address nor a host name", host))
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		problems = append(problems, fmt.Sprintf("port %q: give one from 1 to 65535", port))
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid %s %q: %s", flag, v, strings.Join(problems, "; "))
	}
	return nil
}

// checkTLSSAN checks a --tls-san value, a name or an address the TLS listener's certificate is
// to be good for, and returns it as the certificate has it: a name in lower case, an address
// in its usual form.
func checkTLSSAN(v string) (string, error) {
	if ip, err := netip.ParseAddr(v); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("invalid --tls-san %q: an address with a zone cannot be named in a certificate; give it without %%%s", v, ip.Zone())
		}
		return ip.Unmap().String(), nil
	}
	if !api.IsHostName(v) {
		return "", fmt.Errorf("invalid --tls-san %q: want a host name or an IP address, e.g. sandboxd.example.com or 192.0.2.10", v)
	}
	return strings.TrimSuffix(strings.ToLower(v), "."), nil
}
