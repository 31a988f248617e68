package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hiloop/hiloop/pkg/api"
)

// sshValueOptions are the ssh options that take a value (ssh(1)'s synopsis).
const sshValueOptions = "BbcDEeFIiJLlmOoPpQRSWw"

// SSHShimMain runs hiloop-ssh with the process's arguments and returns its exit code.
func SSHShimMain() int {
	f := NewFactory()
	args, name, err := shimArgs(os.Args[1:])
	if err == nil {
		err = runShim(f, args, name)
	}
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		fmt.Fprintf(f.IO.ErrOut, "hiloop-ssh: %s\n", err)
	}
	return exitCode(err)
}

func runShim(f *Factory, args []string, name string) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	cfg, err := sshConfigFor(context.Background(), c, name)
	if err != nil {
		return err
	}
	return runSSH(f, append([]string{"-F", cfg}, args...))
}

// shimArgs finds the destination among ssh-style arguments and points it at the sandbox's
// generated Host: "[user@]NAME" becomes "NAME.hiloop" (the sandbox is the user). A -l USER is
// dropped for the same reason. A NAME that breaks the naming rule is invalid_name.
func shimArgs(in []string) (out []string, name string, err error) {
	for i := 0; i < len(in); i++ {
		arg := in[i]
		if name == "" && arg == "--" {
			continue
		}
		if name == "" && strings.HasPrefix(arg, "-") && len(arg) > 1 {
			// Options may be grouped (-tt, -4v); one taking a value ends the group.
			for j := 1; j < len(arg); j++ {
				if !strings.ContainsRune(sshValueOptions, rune(arg[j])) {
					continue
				}
				value := arg[j+1:]
				if value == "" {
					if i+1 >= len(in) {
						return nil, "", &usageError{fmt.Errorf("ssh option -%c needs a value", arg[j])}
					}
					i++
					value = in[i]
				}
				if arg[j] != 'l' {
					out = append(out, arg[:j+1], value)
				} else if j > 1 {
					out = append(out, arg[:j])
				}
				arg = ""
				break
			}
			if arg != "" {
				out = append(out, arg)
			}
			continue
		}
		if name == "" {
			name = arg[strings.LastIndex(arg, "@")+1:]
			// The name goes into a file path and an ssh_config Host line: check it first.
			if err := api.ValidateName("sandbox", name); err != nil {
				return nil, "", err
			}
			out = append(out, name+".hiloop")
			continue
		}
		out = append(out, arg)
	}
	if name == "" {
		return nil, "", &usageError{errors.New("usage: hiloop-ssh [ssh options] NAME [CMD...]")}
	}
	return out, name, nil
}
