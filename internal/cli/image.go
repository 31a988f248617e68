package cli

import (
	"context"
	"fmt"
	"strings"
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
	cmd.AddCommand(newCmdImageBuild(f, nil), newCmdImageList(f, nil))
	return cmd
}

// ImageBuildOptions are the argument and flags of `hiloop image build`.
type ImageBuildOptions struct {
	Name   string
	Post   api.ImageBuildPost
	Output string
}

func newCmdImageBuild(f *Factory, runF func(*ImageBuildOptions) error) *cobra.Command {
	opts := &ImageBuildOptions{}
	cmd := &cobra.Command{
		Use:   "build NAME",
		Short: "Build an image from its definition (progress on stderr)",
		Long: `Build an image through the daemon from its definition in images/NAME.

The build streams its progress to stderr. Rebuilding an image whose definition has not changed
does nothing unless --force is given. Sandboxes pick up a rebuilt image at their next start.`,
		Example: "  hiloop image build base",
		Args:    exactArgs(1, "one image NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, imageBuildRun)
		},
	}
	cmd.Flags().BoolVar(&opts.Post.Force, "force", false, "rebuild even if the definition has not changed")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func imageBuildRun(ctx context.Context, f *Factory, opts *ImageBuildOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	start := time.Now()
	// The build's log scrolls above a spinner; the daemon reports steps, not a fraction.
	progress := f.IO.StartProgress("building " + opts.Name)
	img, err := c.BuildImage(ctx, opts.Name, opts.Post, func(line string) {
		progress.Println(fmt.Sprintf("%6.1fs  %s", time.Since(start).Seconds(), line))
	})
	progress.Stop()
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, img, func(t *table) {
		t.head("NAME", "SIZE", "DIGEST", "BUILT", "HARNESSES")
		t.row(img.Name, formatBytes(img.SizeBytes), shortDigest(img.Digest), img.BuiltAt.Local().Format(time.RFC3339), harnessList(img))
	})
}

// ImageListOptions are the flags of `hiloop image list`.
type ImageListOptions struct {
	Output string
}

func newCmdImageList(f *Factory, runF func(*ImageListOptions) error) *cobra.Command {
	opts := &ImageListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List built images and the definitions the daemon can build",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, imageListRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func imageListRun(ctx context.Context, f *Factory, opts *ImageListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListImages(ctx)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, list, func(t *table) {
		t.head("NAME", "STATUS", "SIZE", "DIGEST", "BUILT", "HARNESSES")
		built := map[string]api.Image{}
		for _, img := range list.Images {
			built[img.Name] = img
		}
		for _, name := range list.Definitions {
			img, ok := built[name]
			if !ok {
				t.row(name, "not built", "-", "-", "-", "-")
				continue
			}
			t.row(name, "built", formatBytes(img.SizeBytes), shortDigest(img.Digest), img.BuiltAt.Local().Format(time.RFC3339), harnessList(img))
		}
	})
}

// harnessList is the HARNESSES column: name@version, comma-separated, or "-" for none.
func harnessList(img api.Image) string {
	if len(img.Harnesses) == 0 {
		return "-"
	}
	hs := make([]string, len(img.Harnesses))
	for i, h := range img.Harnesses {
		hs[i] = h.Name + "@" + h.Version
	}
	return strings.Join(hs, ",")
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
