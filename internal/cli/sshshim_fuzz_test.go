package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// FuzzShimArgs parses hiloop-ssh arguments as git, rsync, scp or a person would pass them
// (NUL-separated here, since an argument cannot hold one). The name it finds goes into a file
// path and an ssh_config Host line, so it must be a valid sandbox name; the command after the
// destination must reach ssh untouched; and the rewritten options must parse to themselves.
func FuzzShimArgs(f *testing.F) {
	for _, args := range [][]string{
		{"web"},
		{"web", "ls", "-la"},
		{"-o", "SendEnv=GIT_PROTOCOL", "git@web", "git-upload-pack '/workspace/r.git'"},
		{"-x", "-oForwardAgent=no", "-l", "agent", "-s", "--", "web", "sftp"},
		{"-l", "me", "web", "rsync", "--server", "-vlogDtpre.iLsfxCIvu", ".", "/workspace/d"},
		{"-tt", "-p2222", "-L", "8080:127.0.0.1:80", "web"},
		{"-4lme", "web"},
		{"-o", "-l", "web", "--", "-x"},
		{"a@b@web"}, {"web@"}, {"--", "-p"},
		{}, {"-o"}, {"-p", "22"},
	} {
		f.Add(strings.Join(args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, joined string) {
		var in []string
		if joined != "" {
			in = strings.Split(joined, "\x00")
		}
		out, name, err := shimArgs(slices.Clone(in))
		if err != nil {
			var ue *usageError
			var ae *api.Error
			if !errors.As(err, &ue) && !(errors.As(err, &ae) && ae.Code == api.CodeInvalidName) {
				t.Fatalf("shimArgs(%q): error %v (%T) is neither a usage error nor invalid_name", in, err, err)
			}
			return
		}
		if err := api.ValidateName("sandbox", name); err != nil {
			t.Fatalf("shimArgs(%q) = %q, name %q: %v", in, out, name, err)
		}
		// Somewhere in out is the destination, followed by the input's own tail; putting the
		// name back there gives arguments that parse to the same result.
		for k, arg := range out {
			tail := out[k+1:]
			if arg != name+".hiloop" || len(tail) > len(in) || !slices.Equal(tail, in[len(in)-len(tail):]) {
				continue
			}
			again := slices.Clone(out)
			again[k] = name
			if out2, name2, err := shimArgs(again); err == nil && name2 == name && slices.Equal(out2, out) {
				return
			}
		}
		t.Fatalf("shimArgs(%q) = %q, %q: no destination with the command after it, or it does not parse to itself", in, out, name)
	})
}
