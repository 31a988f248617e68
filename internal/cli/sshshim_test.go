package cli

import (
	"reflect"
	"testing"
)

func TestShimArgs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		out  []string
		name string
	}{
		{[]string{"web"}, []string{"web.hiloop"}, "web"},
		{[]string{"web", "ls", "-la"}, []string{"web.hiloop", "ls", "-la"}, "web"},
		// git: GIT_SSH_COMMAND=hiloop-ssh
		{[]string{"-o", "SendEnv=GIT_PROTOCOL", "git@web", "git-upload-pack '/workspace/r.git'"},
			[]string{"-o", "SendEnv=GIT_PROTOCOL", "web.hiloop", "git-upload-pack '/workspace/r.git'"}, "web"},
		// scp -S hiloop-ssh (sftp mode)
		{[]string{"-x", "-oForwardAgent=no", "-oPermitLocalCommand=no", "-oClearAllForwardings=yes", "-oRemoteCommand=none", "-oRequestTTY=no", "-l", "agent", "-s", "--", "web", "sftp"},
			[]string{"-x", "-o", "ForwardAgent=no", "-o", "PermitLocalCommand=no", "-o", "ClearAllForwardings=yes", "-o", "RemoteCommand=none", "-o", "RequestTTY=no", "-s", "web.hiloop", "sftp"}, "web"},
		// rsync -e hiloop-ssh
		{[]string{"-l", "me", "web", "rsync", "--server", "-vlogDtpre.iLsfxCIvu", ".", "/workspace/d"},
			[]string{"web.hiloop", "rsync", "--server", "-vlogDtpre.iLsfxCIvu", ".", "/workspace/d"}, "web"},
		{[]string{"-tt", "-p2222", "-L", "8080:127.0.0.1:80", "web"}, []string{"-tt", "-p", "2222", "-L", "8080:127.0.0.1:80", "web.hiloop"}, "web"},
		{[]string{"-4lme", "web"}, []string{"-4", "web.hiloop"}, "web"},
	} {
		out, name, err := shimArgs(tc.in)
		if err != nil || name != tc.name || !reflect.DeepEqual(out, tc.out) {
			t.Errorf("shimArgs(%q) = %q, %q, %v; want %q, %q", tc.in, out, name, err, tc.out, tc.name)
		}
	}
	for _, in := range [][]string{{}, {"-o"}, {"-p", "22"}} {
		if _, _, err := shimArgs(in); err == nil {
			t.Errorf("shimArgs(%q) accepted", in)
		}
	}
}
