package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/x/ansi"
	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/internal/styles"
	"github.com/hiloop/hiloop/internal/units"
	"github.com/hiloop/hiloop/internal/yamlout"
)

// addOutputFlag adds -o/--output to a read command.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table, json or yaml")
}

// checkOutput checks a -o value before anything is asked of the daemon.
func checkOutput(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	return &usageError{fmt.Errorf("invalid --output %q: use table, json or yaml", format)}
}

// summaryUnlessOutput checks a command's -o value, then empties it unless -o was given: such a
// command answers with one line by default.
func summaryUnlessOutput(cmd *cobra.Command, output *string) error {
	if err := checkOutput(*output); err != nil {
		return err
	}
	if !cmd.Flags().Changed("output") {
		*output = ""
	}
	return nil
}

// table collects rows for aligned output.
type table struct {
	header []string // a list's column names, in capitals; nil for name: value rows
	rows   [][]string
}

// head sets the header row of a list.
func (t *table) head(cells ...string) { t.header = cells }

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// printOutput prints v to stdout as JSON or YAML (the raw pkg/api structs, never coloured), or as
// the table fill makes, coloured when stdout takes colour.
func printOutput(ios *iostreams.IOStreams, format string, v any, fill func(*table)) error {
	w := ios.Out
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yamlout.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "":
		t := &table{}
		fill(t)
		_, err := io.WriteString(w, t.render(ios.Styles()))
		return err
	}
	return checkOutput(format)
}

// withProgress runs call, which may take seconds, with a spinner labelled label on a terminal
// stderr ("starting web").
func withProgress[T any](f *Factory, label string, call func() (T, error)) (T, error) {
	p := f.IO.StartProgress(label)
	defer p.Stop()
	return call()
}

// stateLabels name what holds a state word, which is coloured by what it says: a list's column,
// or the name of a name: value row.
var stateLabels = map[string]bool{"STATE": true, "STATUS": true, "state:": true, "status:": true}

// tablePadding is the space between columns.
const tablePadding = 2

// render lays the table out in columns, as text/tabwriter would, but measures cells by what they
// show so that colour does not shift them: a cell is as wide as the widest in its column among
// the adjacent rows that have a cell after it; a row's last cell is not padded.
func (t *table) render(st *styles.Styles) string {
	rows := t.rows
	if t.header != nil {
		rows = append([][]string{t.header}, rows...)
	}
	widths := make([][]int, len(rows))
	for i, r := range rows {
		widths[i] = make([]int, len(r))
	}
	for col := 0; ; col++ {
		found := false
		for i := 0; i < len(rows); {
			if len(rows[i]) <= col+1 {
				i++
				continue
			}
			found = true
			end, w := i, 0
			for ; end < len(rows) && len(rows[end]) > col+1; end++ {
				w = max(w, ansi.StringWidth(rows[end][col]))
			}
			for ; i < end; i++ {
				widths[i][col] = w + tablePadding
			}
		}
		if !found {
			break
		}
	}
	var b strings.Builder
	for i, r := range rows {
		for j, cell := range r {
			styled := cell
			switch {
			case t.header != nil && i == 0:
				styled = st.TableHeader.Render(cell)
			case t.header != nil && j < len(t.header) && stateLabels[t.header[j]],
				t.header == nil && j > 0 && stateLabels[r[j-1]]:
				styled = st.State(cell).Render(cell)
			}
			b.WriteString(styled)
			if j < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i][j]-ansi.StringWidth(cell)))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// formatBytes prints a size the one way hiloop prints sizes (units.Bytes).
func formatBytes(n int64) string { return units.Bytes(n) }
