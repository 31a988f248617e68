package fakeprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// sse writes a server-sent event stream, flushing every event as the providers do, so a reader
// sees each delta when it is sent.
type sse struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	delay time.Duration
}

// startSSE sends the stream's headers.
func startSSE(w http.ResponseWriter, r *http.Request, delay time.Duration) *sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w), ctx: r.Context(), delay: delay}
	s.rc.Flush()
	return s
}

// event writes one event: an "event:" line when name is set (Anthropic and Responses streams
// name theirs, Chat Completions does not), and data as one line of JSON (or as it is, for a
// string, such as Chat Completions' [DONE]).
func (s *sse) event(name string, data any) error {
	var payload []byte
	if str, ok := data.(string); ok {
		payload = []byte(str)
	} else {
		var err error
		if payload, err = json.Marshal(data); err != nil {
			return err
		}
	}
	if name != "" {
		if _, err := fmt.Fprintf(s.w, "event: %s\n", name); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", payload); err != nil {
		return err
	}
	return s.rc.Flush()
}

// pause waits the configured delay before a delta; it fails when the client has gone.
func (s *sse) pause() error {
	return sleep(s.ctx, s.delay)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
