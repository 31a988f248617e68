package daemon

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/hiloop/hiloop/internal/eventlog"
)

// addEventLimitFlags declares the flags of the session event logs' limits (docs/operations.md)
// and returns what fills lim from them once they are parsed.
func addEventLimitFlags(f *pflag.FlagSet, lim *eventlog.Limits) func() error {
	def := eventlog.DefaultLimits
	var sessionMiB, sandboxMiB int64
	f.Int64Var(&lim.SessionEvents, "session-log-events", def.SessionEvents, "the most events one session's log keeps; a turn that would store more is stopped with a notice and the session takes no prompt (0: no limit)")
	f.Int64Var(&sessionMiB, "session-log-mib", def.SessionBytes>>20, "the most MiB of events one session's log keeps (0: no limit)")
	f.Int64Var(&lim.SandboxEvents, "sandbox-log-events", def.SandboxEvents, "the most events the logs of one sandbox's sessions keep together (0: no limit)")
	f.Int64Var(&sandboxMiB, "sandbox-log-mib", def.SandboxBytes>>20, "the most MiB of events the logs of one sandbox's sessions keep together (0: no limit)")
	return func() error {
		var errs []error
		for _, v := range []struct {
			name string
			v    int64
		}{
			{"session-log-events", lim.SessionEvents}, {"session-log-mib", sessionMiB},
			{"sandbox-log-events", lim.SandboxEvents}, {"sandbox-log-mib", sandboxMiB},
		} {
			if v.v < 0 || v.v > 1<<40 {
				errs = append(errs, fmt.Errorf("invalid --%s %d: use 0 (no limit) or a positive number up to 2^40", v.name, v.v))
			}
		}
		lim.SessionBytes, lim.SandboxBytes = sessionMiB<<20, sandboxMiB<<20
		return errors.Join(errs...)
	}
}
