package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hiloop/hiloop/internal/yamlout"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// recordLog is a numbered log the daemon serves a page at a time and follows by long poll: a
// sandbox's egress log, the audit log.
type recordLog[T any] struct {
	// page returns up to api.MaxEgressLogPage records after seq after.
	page func(ctx context.Context, after uint64) ([]T, error)
	// follow calls fn with every record after seq after until ctx ends.
	follow func(ctx context.Context, after uint64, fn func(T) error, opts ...client.StreamOption) error
	seq    func(T) uint64
	// header is the table's first line, printed once the first page arrived (so a log that
	// cannot be read prints none).
	header string
	// line is one record as a table line.
	line func(T) string
}

// print prints the log's records after seq after, in format, then with follow keeps printing
// new ones until ctx ends (Ctrl-C), which is success.
func (l recordLog[T]) print(ctx context.Context, f *Factory, format string, after uint64, follow bool) error {
	ctx, stop := followContext(ctx, follow)
	defer stop()
	show := func(rec T) error {
		if format == "table" {
			_, err := fmt.Fprintln(f.IO.Out, l.line(rec))
			return err
		}
		return writeRecord(f.IO.Out, format, rec)
	}
	for first := true; ; first = false {
		page, err := l.page(ctx, after)
		if err != nil {
			return err
		}
		if first && format == "table" {
			if _, err := fmt.Fprintln(f.IO.Out, l.header); err != nil {
				return err
			}
		}
		for _, rec := range page {
			if err := show(rec); err != nil {
				return err
			}
			after = l.seq(rec)
		}
		if len(page) < api.MaxEgressLogPage {
			break
		}
	}
	if !follow {
		return nil
	}
	err := l.follow(ctx, after, show, client.OnStreamLost(func(err error) {
		fmt.Fprintf(f.IO.ErrOut, "hiloop: %s; reconnecting\n", err)
	}))
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return nil // Ctrl-C ends a follow
	}
	return err
}

// writeRecord prints one record of a log as a JSON line or a YAML document.
func writeRecord(w io.Writer, format string, rec any) error {
	if format == "yaml" {
		b, err := yamlout.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "---\n%s", b)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(rec)
}
