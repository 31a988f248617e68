package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
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

// table collects rows for tab-aligned output.
type table struct{ rows [][]string }

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// printOutput prints v as JSON or YAML (the raw pkg/api structs), or as the table fill makes.
func printOutput(w io.Writer, format string, v any, fill func(*table)) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "":
		t := &table{}
		fill(t)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range t.rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	}
	return checkOutput(format)
}

// formatBytes prints a size in binary units, e.g. "10.0 GiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
