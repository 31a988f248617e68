package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

func newCmdImage(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image <verb>",
		Aliases: []string{"images"},
		Short:   "Build and list sandbox images",
	}
	cmd.AddCommand(newCmdImageBuild(f), newCmdImageList(f))
	return cmd
}

func newCmdImageBuild(f *Factory) *cobra.Command {
	var p api.ImageBuildPost
	var output string
	cmd := &cobra.Command{
		Use:   "build NAME",
		Short: "Build an image from its definition (progress on stderr)",
		Long: `Build an image through the daemon from its definition in images/NAME.

The build streams its progress to stderr. Rebuilding an image whose definition has not changed
does nothing unless --force is given. Sandboxes pick up a rebuilt image at their next start.`,
		Example: "  hiloop image build base",
		Args:    exactArgs(1, "one image NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			start := time.Now()
			img, err := c.BuildImage(cmd.Context(), args[0], p, func(line string) {
				fmt.Fprintf(f.IO.ErrOut, "%6.1fs  %s\n", time.Since(start).Seconds(), line)
			})
			if err != nil {
				return err
			}
			return printOutput(f.IO.Out, output, img, func(t *table) {
				t.row("NAME", "SIZE", "DIGEST", "BUILT")
				t.row(img.Name, formatBytes(img.SizeBytes), shortDigest(img.Digest), img.BuiltAt.Local().Format(time.RFC3339))
			})
		},
	}
	cmd.Flags().BoolVar(&p.Force, "force", false, "rebuild even if the definition has not changed")
	addOutputFlag(cmd, &output)
	return cmd
}

func newCmdImageList(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List built images and the definitions the daemon can build",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			list, err := c.ListImages(cmd.Context())
			if err != nil {
				return err
			}
			return printOutput(f.IO.Out, output, list, func(t *table) {
				t.row("NAME", "STATUS", "SIZE", "DIGEST", "BUILT")
				built := map[string]api.Image{}
				for _, img := range list.Images {
					built[img.Name] = img
				}
				for _, name := range list.Definitions {
					img, ok := built[name]
					if !ok {
						t.row(name, "not built", "-", "-", "-")
						continue
					}
					t.row(name, "built", formatBytes(img.SizeBytes), shortDigest(img.Digest), img.BuiltAt.Local().Format(time.RFC3339))
				}
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
