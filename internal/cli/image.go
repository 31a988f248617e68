package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func newCmdImage(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image <verb>",
		Aliases: []string{"images"},
		Short:   "Build, derive, import, pull, list and delete sandbox images",
	}
	cmd.AddCommand(newCmdImageBuild(f, nil), newCmdImageList(f, nil), newCmdImageGet(f, nil), newCmdImageDelete(f, nil),
		newCmdImageImport(f, nil), newCmdImagePull(f, nil))
	return cmd
}

// ImageBuildOptions are the argument and flags of `hiloop image build`.
type ImageBuildOptions struct {
	Name    string
	Post    api.ImageBuildPost
	Scripts []string // --script files, read into Post.Steps
	Runs    []string // --run commands, Post.Steps as they are
	Verbose bool
	Output  string
}

func newCmdImageBuild(f *Factory, runF func(*ImageBuildOptions) error) *cobra.Command {
	opts := &ImageBuildOptions{}
	cmd := &cobra.Command{
		Use:   "build NAME",
		Short: "Build an image from its definition, or derive one from another image",
		Long: `Build an image through the daemon from its definition in images/NAME, or, with --from,
derive image NAME from another image: each --script file (or --run command) runs in order, as
root with sh -e, in a copy of the other image's root filesystem, with the host's network. The
new image records its parent and steps (see hiloop image get) and keeps the parent's exec
environment; it does not change when the parent is rebuilt or deleted. Without --from, a derived
image builds again from what it recorded.

A terminal shows where the build is; --verbose (or a stderr that is not a terminal) shows every
line of its output. Rebuilding an image whose definition (or parent and steps) has not changed
does nothing unless --force is given. Sandboxes pick up a rebuilt image at their next start.`,
		Example: `  hiloop image build base
  hiloop image build tools --from base --run 'apt-get update && apt-get install -y ripgrep'
  hiloop image build web --from base --script setup.sh`,
		Args: exactArgs(1, "one image NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if err := opts.steps(f); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, imageBuildRun)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.Post.Force, "force", false, "rebuild even if nothing it is made from has changed")
	fl.StringVar(&opts.Post.From, "from", "", "derive the image from this image instead of a definition")
	fl.StringArrayVar(&opts.Scripts, "script", nil, "with --from: a shell script file to run as root (repeatable; - reads stdin)")
	fl.StringArrayVar(&opts.Runs, "run", nil, "with --from: a shell command to run as root (repeatable)")
	fl.BoolVarP(&opts.Verbose, "verbose", "v", false, "show every line of the build's output")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// steps reads the --script files (their text goes to the daemon, not their paths) or takes the
// --run commands as the derived image's steps.
func (o *ImageBuildOptions) steps(f *Factory) error {
	if len(o.Scripts) > 0 && len(o.Runs) > 0 {
		return &usageError{errors.New("--script and --run exclude each other: give the steps one way, in the order they run")}
	}
	if o.Post.From == "" {
		if len(o.Scripts)+len(o.Runs) > 0 {
			return &usageError{errors.New("--script and --run need --from: name the image to derive from")}
		}
		return nil
	}
	if len(o.Scripts)+len(o.Runs) == 0 {
		return &usageError{errors.New("--from needs steps: give --script FILE or --run COMMAND")}
	}
	o.Post.Steps = o.Runs
	for _, p := range o.Scripts {
		var b []byte
		var err error
		if p == "-" {
			b, err = io.ReadAll(io.LimitReader(f.IO.In, api.MaxImageStepBytes+1))
		} else {
			b, err = os.ReadFile(p)
		}
		if err != nil {
			return &usageError{fmt.Errorf("--script: %w", err)}
		}
		o.Post.Steps = append(o.Post.Steps, string(b))
	}
	if err := o.Post.Validate(); err != nil {
		return &usageError{err}
	}
	return nil
}

func imageBuildRun(ctx context.Context, f *Factory, opts *ImageBuildOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	p := startBuildProgress(f, "building "+opts.Name, opts.Verbose)
	img, err := c.BuildImageEvents(ctx, opts.Name, opts.Post, p.events())
	p.stop()
	if err != nil {
		return err
	}
	return printImageRow(f, opts.Output, img)
}

// ImageImportOptions are the arguments and flags of `hiloop image import`.
type ImageImportOptions struct {
	Name    string
	File    string
	Force   bool
	Verbose bool
	Output  string
}

func newCmdImageImport(f *Factory, runF func(*ImageImportOptions) error) *cobra.Command {
	opts := &ImageImportOptions{}
	cmd := &cobra.Command{
		Use:   "import NAME FILE",
		Short: "Make an image from a docker save tarball or an OCI layout archive",
		Long: `Make image NAME from the container image in FILE: a tarball written by docker save
(or podman save) or an OCI image layout in a tar. The file is streamed to the daemon, which
applies the layers in order, adds the agent user and sudo when the image lacks them (and says
so), and keeps the image's ENV and WORKDIR as the defaults of every exec. An image without
/bin/sh is refused. Importing the same image again does nothing unless --force is given.`,
		Example: `  docker save -o tools.tar tools:latest && hiloop image import tools tools.tar`,
		Args:    exactArgs(2, "an image NAME and a FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.File = args[0], args[1]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, imageImportRun)
		},
	}
	cmd.Flags().BoolVar(&opts.Force, "force", false, "convert again even if the image is up to date")
	cmd.Flags().BoolVarP(&opts.Verbose, "verbose", "v", false, "show every line of the conversion's output")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func imageImportRun(ctx context.Context, f *Factory, opts *ImageImportOptions) error {
	file, err := os.Open(opts.File)
	if err != nil {
		return &usageError{err}
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return &usageError{fmt.Errorf("%s is not a regular file", opts.File)}
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	p := startBuildProgress(f, "importing "+opts.Name, opts.Verbose)
	r := &countingReader{r: file, total: st.Size(), progress: p.p}
	img, err := c.ImportImage(ctx, opts.Name, r, st.Size(), opts.Force, p.events())
	p.stop()
	if err != nil {
		return err
	}
	return printImageRow(f, opts.Output, img)
}

// countingReader shows how much of an upload is sent.
type countingReader struct {
	r        io.Reader
	n, total int64
	progress *iostreams.Progress
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.total > 0 {
		c.progress.Set(float64(c.n)/float64(c.total), formatBytes(c.n)+" / "+formatBytes(c.total))
	}
	return n, err
}

// ImagePullOptions are the arguments and flags of `hiloop image pull`.
type ImagePullOptions struct {
	Name    string
	Post    api.ImagePullPost
	Verbose bool
	Output  string
}

func newCmdImagePull(f *Factory, runF func(*ImagePullOptions) error) *cobra.Command {
	opts := &ImagePullOptions{}
	cmd := &cobra.Command{
		Use:   "pull NAME REF",
		Short: "Make an image from a container image in a registry",
		Long: `Make image NAME from the container image REF in an OCI registry (for the daemon's
platform), converted as hiloop image import does. The registry login comes from your Docker
config file ($DOCKER_CONFIG/config.json, else ~/.docker/config.json, with its credential
helpers; without one, Podman's auth.json), read here and sent to the daemon for this pull only;
without a login the pull is anonymous.
A registry on the loopback (localhost, 127.0.0.1) is reached over plain HTTP.`,
		Example: `  hiloop image pull py ghcr.io/astral-sh/uv:python3.12-bookworm`,
		Args:    exactArgs(2, "an image NAME and a registry REF"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Post.Ref = args[0], args[1]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if err := opts.Post.Validate(); err != nil {
				return &usageError{err}
			}
			return runCommand(cmd, f, opts, runF, imagePullRun)
		},
	}
	cmd.Flags().BoolVar(&opts.Post.Force, "force", false, "pull and convert again even if the image is up to date")
	cmd.Flags().BoolVarP(&opts.Verbose, "verbose", "v", false, "show every line of the conversion's output")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func imagePullRun(ctx context.Context, f *Factory, opts *ImagePullOptions) error {
	auth, err := registryLogin(opts.Post.Ref)
	if err != nil {
		return err
	}
	opts.Post.Auth = auth
	c, err := f.Client()
	if err != nil {
		return err
	}
	p := startBuildProgress(f, "pulling "+opts.Post.Ref, opts.Verbose)
	img, err := c.PullImage(ctx, opts.Name, opts.Post, p.events())
	p.stop()
	if err != nil {
		return err
	}
	return printImageRow(f, opts.Output, img)
}

// ImageGetOptions are the argument and flags of `hiloop image get`.
type ImageGetOptions struct {
	Name   string
	Output string
}

func newCmdImageGet(f *Factory, runF func(*ImageGetOptions) error) *cobra.Command {
	opts := &ImageGetOptions{}
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a built image and how it was made",
		Args:  exactArgs(1, "one image NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, imageGetRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func imageGetRun(ctx context.Context, f *Factory, opts *ImageGetOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	img, err := c.GetImage(ctx, opts.Name)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, img, func(t *table) {
		t.row("name:", img.Name)
		t.row("kind:", img.Kind)
		if img.From != "" {
			t.row("from:", img.From+" ("+shortDigest(img.FromDigest)+")")
		}
		if img.Ref != "" {
			t.row("ref:", img.Ref)
		}
		if img.ConfigDigest != "" {
			t.row("config:", img.ConfigDigest)
		}
		t.row("digest:", img.Digest)
		t.row("size:", formatBytes(img.SizeBytes))
		t.row("built:", img.BuiltAt.Local().Format(time.RFC3339))
		t.row("harnesses:", harnessList(img))
		if img.WorkDir != "" {
			t.row("workdir:", img.WorkDir)
		}
		for _, e := range img.Env {
			t.row("env:", e)
		}
		for _, a := range img.Added {
			t.row("added:", a)
		}
		for i, st := range img.Steps {
			for j, line := range strings.Split(strings.TrimRight(st, "\n"), "\n") {
				label := ""
				if j == 0 {
					label = fmt.Sprintf("step %d:", i+1)
				}
				t.row(label, line)
			}
		}
	})
}

// ImageDeleteOptions are the argument of `hiloop image delete`.
type ImageDeleteOptions struct {
	Name string
}

func newCmdImageDelete(f *Factory, runF func(*ImageDeleteOptions) error) *cobra.Command {
	opts := &ImageDeleteOptions{}
	return &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a built image no sandbox uses",
		Long: `Delete built image NAME. It is refused while a sandbox (in any state) uses the image;
the error names them. An image built from a definition can be built again.`,
		Args: exactArgs(1, "one image NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, imageDeleteRun)
		},
	}
}

func imageDeleteRun(ctx context.Context, f *Factory, opts *ImageDeleteOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.DeleteImage(ctx, opts.Name); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "%s deleted\n", opts.Name)
	return nil
}

// buildProgress shows an image build's stream on stderr: on a terminal a spinner with the
// stages above it, the output only with --verbose; elsewhere every line, for the log.
type buildProgress struct {
	p       *iostreams.Progress
	verbose bool
	start   time.Time
}

func startBuildProgress(f *Factory, label string, verbose bool) *buildProgress {
	return &buildProgress{p: f.IO.StartProgress(label), verbose: verbose, start: time.Now()}
}

func (b *buildProgress) println(line string) {
	b.p.Println(fmt.Sprintf("%6.1fs  %s", time.Since(b.start).Seconds(), line))
}

func (b *buildProgress) events() client.BuildEvents {
	return client.BuildEvents{
		Stage: b.println,
		Progress: func(line string) {
			if b.verbose || !b.p.Live() {
				b.println(line)
			}
		},
		Warning: func(line string) { b.p.Println("warning: " + line) },
	}
}

func (b *buildProgress) stop() { b.p.Stop() }

func printImageRow(f *Factory, output string, img api.Image) error {
	return printOutput(f.IO, output, img, func(t *table) {
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
		t.head("NAME", "KIND", "STATUS", "SIZE", "DIGEST", "BUILT", "HARNESSES")
		built := map[string]api.Image{}
		for _, img := range list.Images {
			built[img.Name] = img
		}
		row := func(img api.Image) {
			t.row(img.Name, img.Kind, "built", formatBytes(img.SizeBytes), shortDigest(img.Digest), img.BuiltAt.Local().Format(time.RFC3339), harnessList(img))
		}
		for _, name := range list.Definitions {
			img, ok := built[name]
			if !ok {
				t.row(name, "definition", "not built", "-", "-", "-", "-")
				continue
			}
			delete(built, name)
			row(img)
		}
		// Then the images made from other images, archives and registries, by name.
		for _, img := range list.Images {
			if _, ok := built[img.Name]; ok {
				row(img)
			}
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
