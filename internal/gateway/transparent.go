package gateway

// The transparent front door: a connection the capture redirected, carried to where it was
// going once its first bytes name the host (proxy.go holds what both front doors share).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// serveTransparent carries a captured connection to where it was going: the SNI or Host it
// names, else the routed host behind a synthetic address, else its original destination. It
// reports whether rec is still to be emitted.
func (p *Proxy) serveTransparent(c net.Conn, dst netip.AddrPort, rec *Record) bool {
	rec.Port = dst.Port()
	synthetic, _ := p.syntheticHost(dst.Addr())
	h, err := sniff(c, p.firstTimeout(), p.headerTimeout())
	rec.Kind = h.kind
	if err != nil {
		rec.Err = err.Error()
		var he *headError
		if h.kind == KindHTTP && errors.As(err, &he) {
			p.answer(c, he.status, he.msg, rec)
			return false
		}
		reset(c)
		return true
	}
	host := h.host
	if host == "" {
		host = synthetic
	}
	rec.Host = host
	if host == "" {
		rec.Host, _ = p.Refused.Host(dst.Addr()) // the refused name the address stands for, if any
		host = dst.Addr().String()
	}
	if h.ech {
		if err := p.HostPolicy().CheckECH(host, dst.Port()); err != nil {
			p.refusal(err, rec)
			p.refuseTLS(c, h.head, rec)
			return false
		}
	}
	if h.kind == KindHTTP {
		// Every request of a kept-alive or pipelined connection is decided by its own Host:
		// the connection is served by the same per-request forwarder as the explicit proxy,
		// not spliced after its first request.
		fallback := synthetic
		if fallback == "" {
			fallback = dst.Addr().String()
		}
		ec := &explicitConn{Conn: &prefixConn{Conn: c, prefix: h.head}, closed: make(chan struct{}),
			captured: true, port: dst.Port(), fallback: fallback}
		return p.serveHTTPConn(ec, rec, KindHTTP)
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout())
	up, err := p.dial(ctx, host, dst.Port())
	cancel()
	rec.Addr, rec.Rule = up.addr, up.route
	if err != nil {
		p.refusal(err, rec)
		if h.kind == KindTLS && !rec.Allowed {
			p.refuseTLS(c, h.head, rec)
			return false
		}
		// Refused without a way to say why, or an upstream that cannot be reached: a reset,
		// which a client takes as it would from the host itself (and tries its next address).
		reset(c)
		return true
	}
	defer up.conn.Close()
	rec.Allowed = true
	// Secrets (terminate.go): TLS to a host with a secret bound to it is terminated; a
	// placeholder in a request head carried in clear is audited.
	switch {
	case h.kind == KindTLS && p.bound(host):
		p.serveTerminated(c, h.head, normalHost(host), dst.Port(), up.conn, rec)
		return true
	}
	if len(h.head) > 0 {
		up.conn.SetWriteDeadline(time.Now().Add(p.idleTimeout()))
		n, err := up.conn.Write(h.head)
		rec.BytesUp += int64(n)
		if err != nil {
			rec.Err = "upstream: " + err.Error()
			reset(c)
			return true
		}
	}
	bytesUp, bytesDown, err := p.splice(c, up.conn)
	rec.BytesUp += bytesUp
	rec.BytesDown = bytesDown
	if err != nil {
		rec.Err = err.Error()
	}
	return true
}

// answer writes a short plain-text HTTP response to a captured client and ends the connection.
// The record goes out at once, before the client has been given time to read the answer.
func (p *Proxy) answer(c net.Conn, status int, msg string, rec *Record) {
	rec.Duration = time.Since(rec.Time)
	p.audit(*rec)
	body := "hiloop gateway: " + msg + "\n"
	c.SetWriteDeadline(time.Now().Add(p.headerTimeout()))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	lingerClose(c)
}

// refuseTLS answers a refused ClientHello (hello: the bytes of its records, as sniffed) with a
// fatal access_denied alert and ends the connection. The record goes out at once, as with answer.
func (p *Proxy) refuseTLS(c net.Conn, hello []byte, rec *Record) {
	rec.Duration = time.Since(rec.Time)
	p.audit(*rec)
	p.sendAlert(c, hello)
}
