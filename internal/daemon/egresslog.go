package daemon

import (
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/egresslog"
	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/sandbox"
	"github.com/hiloop/hiloop/pkg/api"
)

// egressAudit is the gateway's Audit: every decision goes to the sandbox's audit log (a build
// sandbox's to build, see buildEgressAudit), and to the daemon's log (refusals at info, the
// rest at debug).
func egressAudit(l *egresslog.Log, log *slog.Logger, build func(gateway.Record)) func(gateway.Record) {
	toLog := auditLog(log)
	return func(r gateway.Record) {
		toLog(r)
		if strings.HasPrefix(r.SandboxID, sandbox.BuildIDPrefix) {
			build(r)
			return
		}
		if r.SandboxID != "" {
			l.Add(r.SandboxID, egressRecord(r))
		}
	}
}

// egressRecord is r as the API shows it; the log numbers it.
func egressRecord(r gateway.Record) api.EgressRecord {
	rec := api.EgressRecord{
		Time:           r.Time.UTC(),
		Kind:           r.Kind,
		Host:           r.Host,
		Port:           r.Port,
		Allowed:        r.Allowed,
		Rule:           r.Rule,
		Error:          r.Err,
		BytesUp:        r.BytesUp,
		BytesDown:      r.BytesDown,
		DurationMS:     math.Round(float64(r.Duration)/float64(time.Microsecond)) / 1000,
		Secret:         r.Secret != "",
		SecretMisuse:   r.SecretMisuse,
		Terminated:     r.Terminated,
		QueryType:      r.QueryType,
		SecretScrubbed: r.Scrubbed != "",
	}
	if r.Addr.IsValid() {
		rec.Addr = r.Addr.String()
	}
	for _, a := range r.Answers {
		rec.Answers = append(rec.Answers, a.String())
	}
	return rec
}

// sandboxEgressLog serves GET /v1/sandboxes/{name}/egress/log?after=N&limit=M&wait=S: the
// sandbox's audit records with seq > N. With wait, a request that finds none waits up to S
// seconds for one (a long poll: `hiloop sandbox egress log --follow` asks again with the last
// seq it got, so a daemon restart in between loses nothing).
func (d *Daemon) sandboxEgressLog(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	q, err := parseLogQuery(r)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Get(r.Context(), name)
	if err != nil {
		return err
	}
	recs, err := d.egressLog.Wait(r.Context(), sb.ID, q.after, q.limit, q.wait)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.EgressRecordList{Records: recs})
}

// egressLogDeleted drops the audit records of a deleted sandbox. The sandbox is gone whatever
// happens here; a failure is logged, and the next start prunes what is left.
func (d *Daemon) egressLogDeleted(name, id string) {
	if err := d.egressLog.DeleteSandbox(id); err != nil {
		d.log.Error("delete the egress log of a deleted sandbox; the next start of sandboxd finishes it",
			"sandbox", name, "err", err)
	}
}

// pruneEgressLog drops the audit records of sandboxes deleted while no daemon was told.
func (d *Daemon) pruneEgressLog() error {
	recs, err := d.store.ListSandboxes()
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, rec := range recs {
		ids[rec.ID] = true
	}
	return d.egressLog.Prune(func(id string) bool { return ids[id] })
}

// logQuery is what a read of a numbered log asks: ?after=N&limit=M&wait=S.
type logQuery struct {
	after uint64
	limit int
	wait  time.Duration
}

// parseLogQuery reads a log's query: records after seq after (0), at most limit of them (1 to
// api.MaxEgressLogPage, the default), waiting up to wait seconds for one (0; at most
// api.MaxEgressLogWait).
func parseLogQuery(r *http.Request) (logQuery, error) {
	after, err := uintQuery(r, "after", 0)
	if err != nil {
		return logQuery{}, err
	}
	limit, err := uintQuery(r, "limit", api.MaxEgressLogPage)
	if err != nil {
		return logQuery{}, err
	}
	if limit == 0 || limit > api.MaxEgressLogPage {
		return logQuery{}, api.Errorf(api.CodeInvalidArgument, "invalid limit %d: ask for 1 to %d records", limit, api.MaxEgressLogPage)
	}
	waitS, err := uintQuery(r, "wait", 0)
	if err != nil {
		return logQuery{}, err
	}
	return logQuery{
		after: after,
		limit: int(limit),
		wait:  min(time.Duration(min(waitS, math.MaxInt32))*time.Second, api.MaxEgressLogWait),
	}, nil
}
