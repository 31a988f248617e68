package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/internal/sandbox"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// refusalPeek is how long a refused connection's client has to send the first line of an HTTP
// request, which gets an answer saying why; a client that waits for the server to speak first
// is closed after it.
const refusalPeek = 2 * time.Second

// exposer keeps the host listeners of the sandboxes' exposures (pkg/api's Exposure): one per
// stored record, from the daemon's start (or the exposure's creation) to its removal or the
// daemon's stop. It is the only writer of the exposure records.
type exposer struct {
	store     *store.Store
	sandboxes *sandbox.Manager
	log       *slog.Logger

	mu     sync.Mutex
	open   map[string]*exposed // by sandbox id / port
	closed bool

	links exposeLinks // the one-time links of exposures with auth
}

// exposed is one exposure and its listener (nil when it could not listen: err says why).
type exposed struct {
	rec   store.Exposure
	ln    net.Listener
	err   string
	conns sync.WaitGroup
	// live holds the connections it joined, closed with it.
	mu   sync.Mutex
	live map[net.Conn]struct{}
}

func exposedKey(id string, port int) string { return id + "/" + strconv.Itoa(port) }

// newExposer listens for every stored exposure of a sandbox that still exists and removes
// those of sandboxes that do not (a delete the daemon did not finish).
func newExposer(st *store.Store, sandboxes *sandbox.Manager, log *slog.Logger) (*exposer, error) {
	x := &exposer{store: st, sandboxes: sandboxes, log: log, open: map[string]*exposed{}}
	recs, err := st.Exposures()
	if err != nil {
		return nil, fmt.Errorf("exposures: %w", err)
	}
	ids := map[string]bool{}
	list, err := st.ListSandboxes()
	if err != nil {
		return nil, err
	}
	for _, sb := range list {
		ids[sb.ID] = true
	}
	for _, rec := range recs {
		if !ids[rec.SandboxID] {
			if err := st.DeleteSandboxExposures(rec.SandboxID); err != nil {
				return nil, err
			}
			continue
		}
		e := &exposed{rec: rec}
		if e.ln, err = listenExposure(rec.HostAddr, rec.HostPort); err != nil {
			e.err = err.Error()
			log.Error("expose: cannot listen again", "sandbox", rec.SandboxName, "port", rec.Port, "addr", hostAddrPort(rec), "err", err)
		} else {
			go x.serve(e)
		}
		x.open[exposedKey(rec.SandboxID, rec.Port)] = e
	}
	return x, nil
}

func hostAddrPort(rec store.Exposure) string {
	return net.JoinHostPort(rec.HostAddr, strconv.Itoa(rec.HostPort))
}

func listenExposure(addr string, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, api.Errorf(api.CodeHostPortInUse, "%s is in use on the host: choose another port with --host-port (0 picks a free one)", net.JoinHostPort(addr, strconv.Itoa(port)))
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", net.JoinHostPort(addr, strconv.Itoa(port)), err)
	}
	return ln, nil
}

// expose creates the exposure p asks for, or returns the one that exists if it is the same (a
// retry); created says which.
func (x *exposer) expose(ctx context.Context, name string, p api.ExposurePost) (exp api.Exposure, created bool, err error) {
	sb, err := x.sandboxes.Get(ctx, name)
	if err != nil {
		return api.Exposure{}, false, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return api.Exposure{}, false, api.Errorf(api.CodeUnavailable, "the daemon is shutting down")
	}
	key := exposedKey(sb.ID, p.Port)
	if e, ok := x.open[key]; ok {
		same := e.rec.HostAddr == p.HostAddr && (*p.HostPort == 0 || *p.HostPort == e.rec.HostPort) && (p.Auth == nil || e.rec.Auth == *p.Auth)
		if !same {
			return api.Exposure{}, false, api.Errorf(api.CodeExposureExists, "port %d of sandbox %q is exposed on %s already%s: `hiloop sandbox unexpose %s %d` first", p.Port, bare(name), hostAddrPort(e.rec), authSays(e.rec.Auth), bare(name), p.Port)
		}
		return x.answer(e), false, nil
	}
	ln, err := listenExposure(p.HostAddr, *p.HostPort)
	if err != nil {
		return api.Exposure{}, false, err
	}
	rec := store.Exposure{
		SandboxID: sb.ID, SandboxName: name, Port: p.Port,
		HostAddr: p.HostAddr, HostPort: ln.Addr().(*net.TCPAddr).Port,
		Auth: !netip.MustParseAddr(p.HostAddr).IsLoopback(),
	}
	if p.Auth != nil {
		rec.Auth = *p.Auth
	}
	if rec.Auth {
		rec.Secret = newExposeSecret()
	}
	if err := x.store.PutExposure(rec); err != nil {
		ln.Close()
		return api.Exposure{}, false, err
	}
	// The sandbox may have gone between Get and here: its delete then ran exposuresDeleted
	// before this record existed.
	if cur, err := x.sandboxes.Get(ctx, name); err != nil || cur.ID != sb.ID {
		ln.Close()
		_ = x.store.DeleteExposure(sb.ID, p.Port)
		if err == nil {
			err = api.Errorf(api.CodeSandboxNotFound, "sandbox %q not found", bare(name))
		}
		return api.Exposure{}, false, err
	}
	e := &exposed{rec: rec, ln: ln}
	x.open[key] = e
	go x.serve(e)
	if ip := netip.MustParseAddr(rec.HostAddr); !ip.IsLoopback() {
		x.log.Warn("expose: a sandbox port is reachable from other machines", "sandbox", name, "port", rec.Port, "addr", hostAddrPort(rec), "auth", rec.Auth)
	} else {
		x.log.Info("expose", "sandbox", name, "port", rec.Port, "addr", hostAddrPort(rec), "auth", rec.Auth)
	}
	return x.answer(e), true, nil
}

// answer is the view of e a POST returns: with a new one-time link when it has auth.
func (x *exposer) answer(e *exposed) api.Exposure {
	v := e.view()
	if e.rec.Auth {
		v.Link = x.link(e)
	}
	return v
}

func authSays(auth bool) string {
	if auth {
		return " with auth"
	}
	return " without auth"
}

// unexpose removes the exposure of a sandbox's port and closes its listener and connections.
func (x *exposer) unexpose(ctx context.Context, name string, port int) error {
	sb, err := x.sandboxes.Get(ctx, name)
	if err != nil {
		return err
	}
	x.mu.Lock()
	e, ok := x.open[exposedKey(sb.ID, port)]
	if ok {
		delete(x.open, exposedKey(sb.ID, port))
	}
	x.mu.Unlock()
	if !ok {
		return api.Errorf(api.CodeExposureNotFound, "port %d of sandbox %q is not exposed", port, bare(name))
	}
	if err := x.store.DeleteExposure(sb.ID, port); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	e.close()
	x.log.Info("unexpose", "sandbox", name, "port", port, "addr", hostAddrPort(e.rec))
	return nil
}

// of returns the exposures of the sandbox with id, by port.
func (x *exposer) of(id string) []api.Exposure {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []api.Exposure
	for _, e := range x.open {
		if e.rec.SandboxID == id {
			out = append(out, e.view())
		}
	}
	slices.SortFunc(out, func(a, b api.Exposure) int { return a.Port - b.Port })
	return out
}

// sandboxDeleted removes the exposures of a deleted sandbox.
func (x *exposer) sandboxDeleted(name, id string) {
	x.mu.Lock()
	var gone []*exposed
	for k, e := range x.open {
		if e.rec.SandboxID == id {
			gone = append(gone, e)
			delete(x.open, k)
		}
	}
	x.mu.Unlock()
	if err := x.store.DeleteSandboxExposures(id); err != nil {
		x.log.Error("remove the exposures of a deleted sandbox", "sandbox", name, "err", err)
	}
	for _, e := range gone {
		e.close()
	}
}

// close stops every listener and connection; the records stay for the next daemon.
func (x *exposer) close() {
	x.mu.Lock()
	x.closed = true
	open := x.open
	x.open = map[string]*exposed{}
	x.mu.Unlock()
	for _, e := range open {
		e.close()
	}
}

func (e *exposed) view() api.Exposure {
	return api.Exposure{Port: e.rec.Port, HostAddr: e.rec.HostAddr, HostPort: e.rec.HostPort, Error: e.err, Auth: e.rec.Auth}
}

func (e *exposed) close() {
	if e.ln != nil {
		e.ln.Close()
	}
	e.mu.Lock()
	for c := range e.live {
		c.Close()
	}
	e.mu.Unlock()
	e.conns.Wait()
}

// track adds c to the live connections, or says no once the exposure is closed.
func (e *exposed) track(c net.Conn, add bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !add {
		delete(e.live, c)
		return
	}
	if e.live == nil {
		e.live = map[net.Conn]struct{}{}
	}
	e.live[c] = struct{}{}
}

// serve accepts e's connections until its listener closes: HTTP through authHandler for an
// exposure with auth, every connection joined as it is otherwise.
func (x *exposer) serve(e *exposed) {
	if e.rec.Auth {
		srv := &http.Server{Handler: x.authHandler(e), ReadHeaderTimeout: apiHeaderTimeout,
			ErrorLog: slog.NewLogLogger(x.log.Handler(), slog.LevelDebug)}
		_ = srv.Serve(trackingListener{Listener: e.ln, e: e})
		return
	}
	for {
		c, err := e.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		e.conns.Add(1)
		e.track(c, true)
		go func() {
			defer e.conns.Done()
			defer e.track(c, false)
			x.join(e, c)
		}()
	}
}

// join connects c to the exposed port in the sandbox, or refuses it saying why.
func (x *exposer) join(e *exposed, c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	upstream, err := x.sandboxes.DialLoopback(ctx, e.rec.SandboxName, net.JoinHostPort("localhost", strconv.Itoa(e.rec.Port)))
	cancel()
	if err != nil {
		status, msg := unreachable(e.rec, err)
		refuse(c, status, msg)
		return
	}
	_, _, _ = netcopy.Join(c, upstream)
}

// refuse answers a connection that opens with an HTTP request line with status and msg, and
// closes any other once it has sent something else or nothing for refusalPeek.
func refuse(c net.Conn, status int, msg string) {
	_ = c.SetDeadline(time.Now().Add(refusalPeek))
	line, err := bufio.NewReaderSize(c, 1024).ReadSlice('\n')
	if err != nil || !looksLikeHTTP(line) {
		return
	}
	body := "hiloop: " + msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// looksLikeHTTP reports whether line is an HTTP/1 request line: METHOD SP TARGET SP HTTP/1.x.
func looksLikeHTTP(line []byte) bool {
	for i, b := range line {
		if b == ' ' {
			return i > 0 && bytes.Contains(line[i:], []byte(" HTTP/1."))
		}
		if b < 'A' || b > 'Z' {
			return false
		}
	}
	return false
}

// postExposure serves POST /v1/sandboxes/{name}/exposures.
func (d *Daemon) postExposure(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var p api.ExposurePost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Normalize(); err != nil {
		return err
	}
	exp, created, err := d.exposures.expose(r.Context(), name, p)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, exp)
}

// listExposures serves GET /v1/sandboxes/{name}/exposures.
func (d *Daemon) listExposures(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Get(r.Context(), name)
	if err != nil {
		return err
	}
	list := d.exposures.of(sb.ID)
	if list == nil {
		list = []api.Exposure{}
	}
	return writeJSON(w, http.StatusOK, api.ExposureList{Exposures: list})
}

// deleteExposure serves DELETE /v1/sandboxes/{name}/exposures/{port}.
func (d *Daemon) deleteExposure(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	port, err := api.ParsePort("port", r.PathValue("port"))
	if err != nil {
		return err
	}
	if err := d.exposures.unexpose(r.Context(), name, port); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// withExposures adds the sandbox's exposures to its view.
func (d *Daemon) withExposures(sb api.Sandbox) api.Sandbox {
	if d.exposures != nil {
		sb.Exposures = d.exposures.of(sb.ID)
	}
	return sb
}
