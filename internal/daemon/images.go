package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/pkg/api"
)

func (d *Daemon) listImages(w http.ResponseWriter, r *http.Request) error {
	built, err := d.images.List()
	if err != nil {
		return err
	}
	out := api.ImageList{Images: []api.Image{}, Definitions: images.Names()}
	for _, img := range built {
		out.Images = append(out.Images, imageView(img))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) getImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := api.ValidateName("image", name); err != nil {
		return err
	}
	img, err := d.images.Get(name)
	if err != nil {
		return imageError(name, err)
	}
	return writeJSON(w, http.StatusOK, imageView(img))
}

// deleteImage refuses while a sandbox, in any state, names the image: it would not start again.
func (d *Daemon) deleteImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := api.ValidateName("image", name); err != nil {
		return err
	}
	if _, err := d.images.Get(name); err != nil {
		return imageError(name, err)
	}
	list, err := d.sandboxes.List(r.Context())
	if err != nil {
		return err
	}
	var users []string
	for _, sb := range list {
		if sb.Image == name {
			users = append(users, ownedName(sb.Name))
		}
	}
	if len(users) > 0 {
		return api.Errorf(api.CodeImageInUse, "image %q is used by sandbox %s: delete %s first",
			name, strings.Join(users, ", "), map[bool]string{true: "it", false: "them"}[len(users) == 1])
	}
	// Its spares go first: their roots are made of it.
	d.sandboxes.DropSpares(r.Context(), name)
	if err := d.images.Delete(r.Context(), name); err != nil {
		return imageError(name, err)
	}
	d.log.Info("image deleted", "image", name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func imageView(img images.Image) api.Image {
	v := api.Image{Name: img.Name, Digest: img.Digest, SizeBytes: img.SizeBytes, BuiltAt: img.Built, Kind: img.Kind,
		From: img.From, FromDigest: img.FromDigest, Steps: img.Steps, Ref: img.Ref, ConfigDigest: img.ConfigDigest,
		Env: img.Env, WorkDir: img.WorkDir, Added: img.Added}
	for _, h := range img.Harnesses {
		v.Harnesses = append(v.Harnesses, api.ImageHarness{Name: h.Name, Version: h.Version})
	}
	return v
}

// imageError turns the images package's errors into the API's.
func imageError(name string, err error) error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	if nf := images.NotFoundError(name, err); nf != nil {
		return nf
	}
	switch {
	case errors.Is(err, images.ErrDefinitionName):
		return api.Errorf(api.CodeImageExists, "image %q is the name of an image definition: choose another name", name)
	case errors.Is(err, images.ErrStepFailed):
		return api.Errorf(api.CodeImageBuildFailed, "%v", err)
	case errors.Is(err, images.ErrInvalidImage):
		return api.Errorf(api.CodeInvalidImage, "%v", err)
	case errors.Is(err, images.ErrRegistry):
		return api.Errorf(api.CodeRegistryError, "%v", err)
	}
	return err
}

// buildImage builds a definition, or derives an image when the body names From, streaming the
// progress.
func (d *Daemon) buildImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := api.ValidateName("image", name); err != nil {
		return err
	}
	var p api.ImageBuildPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if p.From != "" {
		if err := d.checkUserImageName(name); err != nil {
			return err
		}
		if _, err := d.images.Get(p.From); err != nil {
			return imageError(p.From, err)
		}
		return d.streamBuild(w, r, name, func(ctx context.Context, progress io.Writer) (images.Image, error) {
			return d.images.Derive(ctx, name, images.DeriveOptions{From: p.From, Steps: p.Steps, Force: p.Force, Runner: buildRunner{d.sandboxes}}, progress)
		})
	}
	known := false
	for _, n := range images.Names() {
		known = known || n == name
	}
	if !known {
		// A derived image builds again from what it recorded: its parent as it is now, its steps.
		if img, err := d.images.Get(name); err == nil && img.Kind == images.KindDerived {
			return d.streamBuild(w, r, name, func(ctx context.Context, progress io.Writer) (images.Image, error) {
				return d.images.Derive(ctx, name, images.DeriveOptions{From: img.From, Steps: img.Steps, Force: p.Force, Runner: buildRunner{d.sandboxes}}, progress)
			})
		}
		return api.Errorf(api.CodeImageNotFound, "no image definition named %q: `hiloop image list` shows the definitions; --from derives an image from another", name)
	}
	return d.streamBuild(w, r, name, func(ctx context.Context, progress io.Writer) (images.Image, error) {
		return d.images.BuildWith(ctx, name, progress, images.BuildOptions{Force: p.Force})
	})
}

// checkUserImageName refuses, before any stream starts, a definition's name for an image made
// from something else.
func (d *Daemon) checkUserImageName(name string) error {
	for _, n := range images.Names() {
		if n == name {
			return imageError(name, images.ErrDefinitionName)
		}
	}
	return nil
}

// importImage takes a docker save or OCI layout archive as the request body (at most
// api.MaxImportBytes), spooled to a file first: both formats need random access.
func (d *Daemon) importImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := api.ValidateName("image", name); err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := d.checkUserImageName(name); err != nil {
		return err
	}
	if r.ContentLength > api.MaxImportBytes {
		return api.Errorf(api.CodeBodyTooLarge, "the archive is %d bytes: at most %d", r.ContentLength, api.MaxImportBytes)
	}
	if err := os.MkdirAll(d.cfg.ImagesDir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.cfg.ImagesDir, ".upload-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, api.MaxImportBytes))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return api.Errorf(api.CodeBodyTooLarge, "the archive is larger than %d bytes", api.MaxImportBytes)
		}
		return api.Errorf(api.CodeBadRequest, "read the archive: %v", err)
	}
	return d.streamBuild(w, r, name, func(ctx context.Context, progress io.Writer) (images.Image, error) {
		return d.images.Import(ctx, name, f.Name(), images.ImportOptions{Force: force, Runner: buildRunner{d.sandboxes}}, progress)
	})
}

// pullImage pulls from a registry with the login the client sent (the daemon keeps none).
func (d *Daemon) pullImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := api.ValidateName("image", name); err != nil {
		return err
	}
	var p api.ImagePullPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if err := d.checkUserImageName(name); err != nil {
		return err
	}
	opts := images.PullOptions{Force: p.Force, Auth: authn.Anonymous, Runner: buildRunner{d.sandboxes}}
	if a := p.Auth; a != nil {
		opts.Auth = authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken})
	}
	return d.streamBuild(w, r, name, func(ctx context.Context, progress io.Writer) (images.Image, error) {
		return d.images.Pull(ctx, name, p.Ref, opts, progress)
	})
}

// streamBuild answers with newline-delimited ImageBuildEvent values: build's stages and output
// as they come, then the image or the error. The build outlives a client that hangs up: another
// client may be waiting for the image.
func (d *Daemon) streamBuild(w http.ResponseWriter, r *http.Request, name string, build func(context.Context, io.Writer) (images.Image, error)) error {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := &buildStream{ev: &eventWriter{w: w}, log: func(line string) { d.log.Info("image build", "image", name, "stage", line) }}
	img, err := build(context.WithoutCancel(r.Context()), out)
	if err != nil {
		apiErr := imageError(name, err)
		var e *api.Error
		if !errors.As(apiErr, &e) {
			d.log.Error("image build", "image", name, "err", err)
			e = api.Errorf(api.CodeInternal, "build image %q: %v", name, err)
		}
		out.ev.send(api.ImageBuildEvent{Error: e})
		return nil
	}
	// Spares of the image's earlier build would serve no create: new ones start from this one.
	d.sandboxes.ImageChanged(name)
	if w := d.hostCAWarning(img); w != "" {
		out.ev.send(api.ImageBuildEvent{Warning: w})
	}
	view := imageView(img)
	out.ev.send(api.ImageBuildEvent{Image: &view})
	return nil
}

// buildStream is the images.Stager a build reports to: each line its own event.
type buildStream struct {
	ev  *eventWriter
	log func(string)
}

func (b *buildStream) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		b.ev.send(api.ImageBuildEvent{Progress: line})
	}
	return len(p), nil
}

// Stage sends a stage and logs it: the daemon log keeps where every build went.
func (b *buildStream) Stage(line string) {
	b.log(line)
	b.ev.send(api.ImageBuildEvent{Stage: line})
}

// eventWriter writes one JSON line per event and flushes it.
type eventWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

func (e *eventWriter) send(v api.ImageBuildEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = io.WriteString(e.w, mustJSON(v)+"\n")
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

var _ images.Stager = (*buildStream)(nil)
