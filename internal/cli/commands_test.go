package cli

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
)

// parser returns a function that builds a command with newCmd and a runF that keeps the
// options, runs it on args, and returns the command's name, those options (nil when runF was
// not reached) and the command's error.
func parser[T any](newCmd func(*Factory, func(*T) error) *cobra.Command) func(*Factory, []string) (string, any, error) {
	return func(f *Factory, args []string) (string, any, error) {
		var got *T
		cmd := newCmd(f, func(opts *T) error { got = opts; return nil })
		root := &cobra.Command{Use: "hiloop", SilenceErrors: true, SilenceUsage: true}
		root.SetFlagErrorFunc(flagUsageError)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.AddCommand(cmd)
		root.SetArgs(append([]string{cmd.Name()}, args...))
		err := root.Execute()
		if got == nil {
			return cmd.Name(), nil, err
		}
		return cmd.Name(), got, err
	}
}

// flagCase is one command line: the options runF must get, or the exit code it must fail with
// before anything runs.
type flagCase struct {
	args []string
	want any // nil when the line is refused
	exit int
}

func ok(want any, args ...string) flagCase { return flagCase{args: args, want: want} }
func refused(exit int, args ...string) flagCase {
	return flagCase{args: args, exit: exit}
}

// defaultCreate leaves CPUs and memory out: the daemon gives its defaults, held to the host's.
var defaultCreate = api.SandboxesPost{Image: api.DefaultImage, StorageClass: api.StorageDurable, PermissionPolicy: api.PolicyAutoApprove}

func withName(p api.SandboxesPost, name string) api.SandboxesPost { p.Name = name; return p }

var defaultExec = api.ExecRequest{User: api.DefaultExecUser}

func withCommand(r api.ExecRequest, cmd ...string) api.ExecRequest { r.Command = cmd; return r }

// commandFlagCases are the command lines of every hiloop command, by command path.
var commandFlagCases = []struct {
	path  string
	parse func(*Factory, []string) (string, any, error)
	cases []flagCase
}{
	{"hiloop version", parser(newCmdVersion), []flagCase{
		ok(&VersionOptions{Output: "table"}),
		ok(&VersionOptions{Output: "json"}, "-o", "json"),
		refused(ExitUsage, "extra"),
		refused(ExitUsage, "-o", "xml"),
	}},
	{"hiloop system info", parser(newCmdSystemInfo), []flagCase{
		ok(&SystemInfoOptions{Output: "table"}),
		ok(&SystemInfoOptions{Output: "yaml"}, "-o", "yaml"),
		refused(ExitUsage, "extra"),
		refused(ExitUsage, "-o", "xml"),
	}},
	{"hiloop sandbox port-forward", parser(newCmdSandboxPortForward), []flagCase{
		ok(&SandboxPortForwardOptions{Name: "web", Ports: []PortSpec{{LocalPort: 8080, Port: 80}}}, "web", "8080:80"),
		ok(&SandboxPortForwardOptions{Name: "web", Ports: []PortSpec{
			{LocalPort: 3000, Port: 3000}, {LocalPort: 0, Port: 8080}, {Addr: "::1", LocalPort: 9000, Port: 9000},
			{Addr: "0.0.0.0", LocalPort: 5432, Port: 5433}}},
			"web", "3000", "0:8080", "[::1]:9000:9000", "0.0.0.0:5432:5433"),
		refused(ExitUsage),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "80:0"),
		refused(ExitUsage, "web", "70000"),
		refused(ExitUsage, "web", "x:80"),
		refused(ExitUsage, "web", "host.example:80:80"),
	}},
	{"hiloop sandbox expose", parser(newCmdSandboxExpose), []flagCase{
		ok(&SandboxExposeOptions{Name: "web", Post: api.ExposurePost{Port: 8642, HostAddr: "127.0.0.1", HostPort: ptrTo(8642)}, Output: "table"}, "web", "8642"),
		ok(&SandboxExposeOptions{Name: "web", Post: api.ExposurePost{Port: 3000, HostAddr: "::1", HostPort: ptrTo(0)}, Output: "json"},
			"web", "3000", "--host-addr", "::1", "--host-port", "0", "-o", "json"),
		ok(&SandboxExposeOptions{Name: "web", Post: api.ExposurePost{Port: 80, HostAddr: "0.0.0.0", HostPort: ptrTo(8080), AllowNonLoopback: true}, Output: "table"},
			"web", "80", "--host-addr", "0.0.0.0", "--host-port", "8080", "--allow-non-loopback"),
		refused(ExitUsage),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "0"),
		refused(ExitUsage, "web", "http"),
		refused(ExitUsage, "web", "80", "--host-port", "70000"),
		refused(ExitUsage, "web", "80", "--host-addr", "example.com"),
		// Reachable from other machines only when said so.
		refused(ExitUsage, "web", "80", "--host-addr", "0.0.0.0"),
	}},
	{"hiloop sandbox unexpose", parser(newCmdSandboxUnexpose), []flagCase{
		ok(&SandboxUnexposeOptions{Name: "web", Port: 8642}, "web", "8642"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "65536"),
	}},
	{"hiloop sandbox create", parser(newCmdSandboxCreate), []flagCase{
		ok(&SandboxCreateOptions{Post: withName(defaultCreate, "web"), Output: "table"}, "web"),
		ok(&SandboxCreateOptions{Post: api.SandboxesPost{Name: "web", Image: "dev", StorageClass: api.StorageEphemeral,
			WorkspaceGiB: 50, RootfsGiB: 20, CPUs: 0.5, MemoryMB: 8192, NoStart: true, FromSnapshot: "s1",
			PermissionPolicy: api.PolicyAsk}, Output: "json"},
			"web", "--cpus", "0.5", "--memory-mb", "8192", "--workspace-gib", "50", "--rootfs-gib", "20", "--storage-class", "ephemeral",
			"--image", "dev", "--no-start", "--from-snapshot", "s1", "--permission-policy", "ask", "-o", "json"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "db"),
		refused(ExitUsage, "web", "--cpus", "many"),
		// An explicit 0 is no request for the default.
		refused(ExitUsage, "web", "--cpus", "0"),
		refused(ExitUsage, "web", "--workspace-gib", "0"),
		refused(ExitUsage, "web", "--rootfs-gib", "0"),
		refused(ExitUsage, "web", "--memory-mb", "0"),
		refused(ExitUsage, "web", "--bogus-flag"),
		refused(ExitUsage, "web", "-o", "xml"),
		ok(&SandboxCreateOptions{Post: func() api.SandboxesPost {
			p := withName(defaultCreate, "web")
			p.Egress = &api.Egress{Mode: api.EgressClosed, Allow: []string{"api.example.com", "*.github.com:443"}}
			return p
		}(), Output: "table"}, "web", "--egress", "closed", "--egress-allow", "API.example.com", "--egress-allow", "*.github.com:443"),
		ok(&SandboxCreateOptions{Post: func() api.SandboxesPost {
			p := withName(defaultCreate, "web")
			p.Egress = &api.Egress{Mode: api.EgressOpen, Deny: []string{"*.example.net", "203.0.113.7:22"}}
			return p
		}(), Output: "table"}, "web", "--egress-deny", "*.example.net", "--egress-deny", "203.0.113.7:22"),
		refused(ExitUsage, "web", "--egress", "shut"),
		refused(ExitUsage, "web", "--egress-allow", "http://example.com"),
		refused(ExitUsage, "web", "--egress-deny", "a.*.example.com"),
		refused(ExitUsage, "web", "--egress-allow", "example.com:99999"),
		ok(&SandboxCreateOptions{Post: func() api.SandboxesPost {
			p := withName(defaultCreate, "web")
			p.Secrets = []api.SecretAttachment{{Secret: "openai-key", Env: "OPENAI_KEY"}, {Secret: "gh", Env: "GITHUB_TOKEN"}}
			return p
		}(), Output: "table"}, "web", "--secret", "openai-key", "--secret", "gh:GITHUB_TOKEN"),
		refused(ExitUsage, "web", "--secret", "gh:1BAD"),
		refused(ExitUsage, "web", "--secret", "gh", "--secret", "gh:OTHER"),
		refused(ExitUsage, "web", "--secret", "Bad_Name"),
		ok(&SandboxCreateOptions{Post: func() api.SandboxesPost {
			p := withName(defaultCreate, "web")
			p.ModelBudgetTokens = 5000000
			return p
		}(), Output: "table"}, "web", "--model-budget-tokens", "5000000"),
		refused(ExitUsage, "web", "--model-budget-tokens", "-1"),
		refused(ExitUsage, "web", "--model-budget-tokens", "1000000000000001"),
		refused(ExitUsage, "web", "--model-budget-tokens", "lots"),
	}},
	{"hiloop sandbox budget", parser(newCmdSandboxBudget), []flagCase{
		ok(&BudgetOptions{Target: "web", Tokens: 5000}, "web", "--tokens", "5000"),
		ok(&BudgetOptions{Target: "web", Tokens: 0, Output: "json"}, "web", "--tokens", "0", "-o", "json"),
		ok(&BudgetOptions{Target: "web"}, "web", "--clear"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "--tokens", "5", "--clear"),
		refused(ExitUsage, "web", "--tokens", "-5"),
		refused(ExitUsage, "--tokens", "5"),
		refused(ExitUsage, "Web", "--tokens", "5"),
		refused(ExitUsage, "web", "--tokens", "5", "-o", "xml"),
	}},
	{"hiloop usage", parser(newCmdUsage), []flagCase{
		ok(&UsageOptions{Output: "table"}),
		ok(&UsageOptions{Sandbox: "web", Session: "s1", Since: "24h", Output: "json"}, "--sandbox", "web", "--session", "s1", "--since", "24h", "-o", "json"),
		ok(&UsageOptions{Since: "7d", Output: "table"}, "--since", "7d"),
		ok(&UsageOptions{Since: "2025-06-30T09:00:00Z", Output: "yaml"}, "--since", "2025-06-30T09:00:00Z", "-o", "yaml"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "--since", "yesterday"),
		refused(ExitUsage, "--since", "-1h"),
		refused(ExitUsage, "--since", "0s"),
		refused(ExitUsage, "--since", "2025-06-30"),
		refused(ExitUsage, "--sandbox", "Web"),
		refused(ExitNotFound, "--session", "Bad/Id"),
		refused(ExitUsage, "-o", "xml"),
	}},
	{"hiloop sandbox secret attach", parser(newCmdSandboxSecretAttach), []flagCase{
		ok(&SandboxSecretAttachOptions{Name: "web", Attachment: api.SecretAttachment{Secret: "openai-key", Env: "OPENAI_KEY"}, Output: "table"}, "web", "openai-key"),
		ok(&SandboxSecretAttachOptions{Name: "web", Attachment: api.SecretAttachment{Secret: "gh", Env: "GH_TOKEN"}, Output: "json"}, "web", "gh", "--env", "GH_TOKEN", "-o", "json"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "gh", "--env", "A-B"),
		refused(ExitUsage, "web", "gh", "--value", "x"),
	}},
	{"hiloop sandbox secret detach", parser(newCmdSandboxSecretDetach), []flagCase{
		ok(&SandboxSecretDetachOptions{Name: "web", Secret: "gh"}, "web", "gh"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "gh", "extra"),
	}},
	{"hiloop secret create", parser(newCmdSecretCreate), []flagCase{
		ok(&SecretCreateOptions{Post: api.SecretsPost{Name: "openai", Hosts: []string{"api.example.com"}, Header: "x-api-key", Format: "{value}"},
			Source: SecretSource{FromStdin: true}, Output: "table"}, "openai", "--host", "API.example.com", "--header", "X-Api-Key", "--from-stdin"),
		ok(&SecretCreateOptions{Post: api.SecretsPost{Name: "gh", Hosts: []string{"api.github.com", "uploads.github.com"}, Header: "authorization",
			Format: "token {value}", PathPrefix: "/repos/"}, Source: SecretSource{FromFile: "tok"}, Output: "json"},
			"gh", "--host", "api.github.com", "--host", "uploads.github.com", "--header", "authorization", "--format", "token {value}",
			"--path-prefix", "/repos/", "--from-file", "tok", "-o", "json"),
		refused(ExitUsage, "openai", "--host", "a.example", "--header", "x-api-key"),
		refused(ExitUsage, "openai", "--host", "a.example", "--header", "x-api-key", "--from-stdin", "--from-file", "f"),
		refused(ExitUsage, "openai", "--host", "a.example", "--header", "x-api-key", "--value", "v"),
		refused(ExitUsage, "openai", "--header", "x-api-key", "--from-stdin"),
		refused(ExitUsage, "openai", "--host", "*.example.com", "--header", "x-api-key", "--from-stdin"),
		refused(ExitUsage, "openai", "--host", "a.example", "--from-stdin"),
		refused(ExitUsage, "openai", "--host", "a.example", "--header", "x", "--format", "Bearer", "--from-stdin"),
		refused(ExitUsage, "Open_AI", "--host", "a.example", "--header", "x", "--from-stdin"),
	}},
	{"hiloop login add", parser(newCmdLoginAdd), []flagCase{
		ok(&LoginAddOptions{Provider: api.LoginClaude, APIKeyStdin: true, Output: "table"}, "claude", "--api-key-stdin"),
		ok(&LoginAddOptions{Provider: api.LoginClaude, OAuthTokenStdin: true, Output: "json"}, "claude", "--oauth-token-stdin", "-o", "json"),
		ok(&LoginAddOptions{Provider: api.LoginCodex, ChatGPTAuthFile: "auth.json", Output: "table"}, "codex", "--chatgpt-auth-file", "auth.json"),
		ok(&LoginAddOptions{Provider: api.LoginCodex, APIKeyStdin: true, Output: "table"}, "codex", "--api-key-stdin"),
		refused(ExitUsage, "claude"),
		refused(ExitUsage, "claude", "--api-key-stdin", "--oauth-token-stdin"),
		refused(ExitUsage, "claude", "--chatgpt-auth-file", "auth.json"),
		refused(ExitUsage, "codex", "--oauth-token-stdin"),
		refused(ExitUsage, "gemini", "--api-key-stdin"),
		refused(ExitUsage, "claude", "--api-key", "sk-ant"),
		refused(ExitUsage),
	}},
	{"hiloop login list", parser(newCmdLoginList), []flagCase{
		ok(&LoginListOptions{Output: "table"}),
		ok(&LoginListOptions{Output: "json"}, "-o", "json"),
		ok(&LoginListOptions{AllUsers: true, Output: "table"}, "--all-users"),
		refused(ExitUsage, "claude"),
	}},
	{"hiloop login remove", parser(newCmdLoginRemove), []flagCase{
		ok(&LoginRemoveOptions{Provider: api.LoginCodex}, "codex"),
		refused(ExitUsage, "gemini"),
		refused(ExitUsage),
	}},
	{"hiloop audit", parser(newCmdAudit), []flagCase{
		ok(&AuditOptions{Output: "table"}),
		ok(&AuditOptions{After: 7, Follow: true, Output: "json"}, "--after", "7", "-f", "-o", "json"),
		refused(ExitUsage, "extra"),
		refused(ExitUsage, "--after", "-1"),
	}},
	{"hiloop secret list", parser(newCmdSecretList), []flagCase{
		ok(&SecretListOptions{Output: "table"}),
		ok(&SecretListOptions{Output: "json"}, "-o", "json"),
		ok(&SecretListOptions{AllUsers: true, Output: "json"}, "--all-users", "-o", "json"),
		refused(ExitUsage, "openai"),
	}},
	{"hiloop secret get", parser(newCmdSecretGet), []flagCase{
		ok(&SecretGetOptions{Name: "openai", Output: "table"}, "openai"),
		ok(&SecretGetOptions{Name: "openai", Output: "yaml"}, "openai", "-o", "yaml"),
		refused(ExitUsage),
	}},
	{"hiloop secret delete", parser(newCmdSecretDelete), []flagCase{
		ok(&SecretDeleteOptions{Name: "openai"}, "openai"),
		refused(ExitUsage),
	}},
	{"hiloop secret rotate", parser(newCmdSecretRotate), []flagCase{
		ok(&SecretRotateOptions{Name: "openai", Source: SecretSource{FromStdin: true}, Output: "table"}, "openai", "--from-stdin"),
		ok(&SecretRotateOptions{Name: "openai", Source: SecretSource{FromFile: "new"}, Output: "table"}, "openai", "--from-file", "new"),
		refused(ExitUsage, "openai"),
		refused(ExitUsage, "openai", "--value", "v"),
	}},
	{"hiloop sandbox get", parser(newCmdSandboxGet), []flagCase{
		ok(&SandboxGetOptions{Name: "web", Output: "table"}, "web"),
		ok(&SandboxGetOptions{Name: "web", Output: "yaml"}, "web", "-o", "yaml"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "-o", "xml"),
	}},
	{"hiloop sandbox list", parser(newCmdSandboxList), []flagCase{
		ok(&SandboxListOptions{Output: "table"}),
		ok(&SandboxListOptions{Output: "json"}, "-o", "json"),
		refused(ExitUsage, "web"),
	}},
	{"hiloop sandbox start", parser(newCmdSandboxStart), []flagCase{
		ok(&SandboxLifecycleOptions{Name: "web"}, "web"),
		ok(&SandboxLifecycleOptions{Name: "web", Output: "table"}, "web", "-o", "table"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "-o", "xml"),
	}},
	{"hiloop sandbox stop", parser(newCmdSandboxStop), []flagCase{
		ok(&SandboxLifecycleOptions{Name: "web"}, "web"),
		ok(&SandboxLifecycleOptions{Name: "web", Output: "json"}, "web", "-o", "json"),
		refused(ExitUsage, "web", "db"),
	}},
	{"hiloop sandbox delete", parser(newCmdSandboxDelete), []flagCase{
		ok(&SandboxDeleteOptions{Name: "web"}, "web"),
		ok(&SandboxDeleteOptions{Name: "web", WithSnapshots: true}, "web", "--with-snapshots"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "-o", "json"),
	}},
	{"hiloop sandbox exec", parser(newCmdSandboxExec), []flagCase{
		ok(&SandboxExecOptions{Name: "web", Request: withCommand(defaultExec, "ls", "-la")}, "web", "--", "ls", "-la"),
		ok(&SandboxExecOptions{Name: "web", Request: withCommand(defaultExec, "true")}, "web", "true"),
		ok(&SandboxExecOptions{Name: "web", Timeout: 10 * time.Minute, Request: api.ExecRequest{Command: []string{"make", "test"},
			Env: []string{"A=1", "B=2"}, WorkDir: "/tmp", User: "root", Stdin: true, TTY: true, TimeoutMS: 600000}},
			"web", "--timeout", "10m", "-e", "A=1", "-e", "B=2", "-w", "/tmp", "-u", "root", "-it", "--", "make", "test"),
		// A timeout under a millisecond still times out rather than meaning none.
		ok(&SandboxExecOptions{Name: "web", Timeout: time.Nanosecond, Request: func() api.ExecRequest {
			r := withCommand(defaultExec, "true")
			r.TimeoutMS = 1
			return r
		}()}, "web", "--timeout", "1ns", "--", "true"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "db", "--", "ls"),
		refused(ExitUsage, "web", "--timeout", "-1s", "--", "ls"),
		refused(ExitUsage, "web", "--timeout", "soon", "--", "ls"),
	}},
	{"hiloop sandbox ssh", parser(newCmdSandboxSSH), []flagCase{
		ok(&SandboxSSHOptions{Name: "web", SSHArgs: []string{}}, "web"),
		ok(&SandboxSSHOptions{Name: "web", Start: true, SSHArgs: []string{"-L", "6767:127.0.0.1:6767", "-N"}},
			"web", "--start", "--", "-L", "6767:127.0.0.1:6767", "-N"),
		ok(&SandboxSSHOptions{Name: "web", SSHArgs: []string{"uname", "-a"}}, "web", "--", "uname", "-a"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "uname"),
		refused(ExitUsage, "web", "-L", "6767:127.0.0.1:6767"),
	}},
	{"hiloop sandbox grow", parser(newCmdSandboxGrow), []flagCase{
		ok(&SandboxGrowOptions{Name: "web", WorkspaceGiB: 50}, "web", "--workspace-gib", "50"),
		ok(&SandboxGrowOptions{Name: "web", WorkspaceGiB: 50, Output: "json"}, "web", "--workspace-gib", "50", "-o", "json"),
		refused(ExitUsage, "web"),
		refused(ExitUsage, "web", "--workspace-gib", "lots"),
		refused(ExitUsage, "--workspace-gib", "50"),
	}},
	{"hiloop sandbox egress", parser(newCmdSandboxEgress), []flagCase{
		ok(&SandboxEgressOptions{Name: "web", Output: "table"}, "web"),
		ok(&SandboxEgressOptions{Name: "web", Output: "json"}, "web", "-o", "json"),
		ok(&SandboxEgressOptions{Name: "web", Mode: api.EgressClosed, Allow: []string{"api.example.com", "[2001:db8::1]:443"},
			Deny: []string{"*.example.net"}, RemoveAllow: []string{"old.example.com"}, RemoveDeny: []string{"10.1.2.3"}, Output: "table"},
			"web", "--mode", "closed", "--allow", "Api.Example.com.", "--allow", "[2001:db8::1]:443", "--deny", "*.example.net",
			"--remove-allow", "old.example.com", "--remove-deny", "10.1.2.3"),
		ok(&SandboxEgressOptions{Name: "web", Mode: api.EgressOpen, Clear: true, Output: "table"}, "web", "--mode", "open", "--clear"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "db"),
		refused(ExitUsage, "web", "--mode", "Closed"),
		refused(ExitUsage, "web", "--allow", "*"),
		refused(ExitUsage, "web", "--remove-deny", "x:0"),
		refused(ExitUsage, "web", "-o", "xml"),
	}},
	{"hiloop sandbox restore", parser(newCmdSandboxRestore), []flagCase{
		ok(&SandboxRestoreOptions{Name: "web", Snapshot: "web-1"}, "web", "web-1"),
		refused(ExitUsage, "web"),
	}},
	{"hiloop sandbox snapshot create", parser(newCmdSnapshotCreate), []flagCase{
		ok(&SnapshotCreateOptions{Sandbox: "web", Output: "table"}, "web"),
		ok(&SnapshotCreateOptions{Sandbox: "web", Post: api.SnapshotsPost{Name: "before"}, IdempotencyKey: "k1", Output: "json"},
			"web", "--name", "before", "--idempotency-key", "k1", "-o", "json"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "-o", "xml"),
	}},
	{"hiloop sandbox snapshot list", parser(newCmdSnapshotList), []flagCase{
		ok(&SnapshotListOptions{Output: "table"}),
		ok(&SnapshotListOptions{Sandbox: "web", Output: "json"}, "web", "-o", "json"),
		refused(ExitUsage, "web", "db"),
	}},
	{"hiloop sandbox snapshot get", parser(newCmdSnapshotGet), []flagCase{
		ok(&SnapshotGetOptions{Name: "web-1", Output: "table"}, "web-1"),
		refused(ExitUsage),
	}},
	{"hiloop sandbox snapshot delete", parser(newCmdSnapshotDelete), []flagCase{
		ok(&SnapshotDeleteOptions{Name: "web-1"}, "web-1"),
		refused(ExitUsage, "web-1", "web-2"),
	}},
	{"hiloop session new", parser(newCmdSessionNew), []flagCase{
		ok(&SessionNewOptions{Post: api.SessionsPost{Sandbox: "web"}}, "web"),
		ok(&SessionNewOptions{Post: api.SessionsPost{Sandbox: "web", Harness: "codex", Cwd: "/workspace/api", PermissionPolicy: api.PolicyAsk},
			IdempotencyKey: "ci-42", Output: "json"},
			"web", "--harness", "codex", "--policy", "ask", "--cwd", "/workspace/api", "--idempotency-key", "ci-42", "-o", "json"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "--policy", "sometimes"),
		refused(ExitUsage, "web", "--cwd", "src"),
		ok(&SessionNewOptions{Post: api.SessionsPost{Sandbox: "web", Harness: "claude-code", BudgetTokens: 20000}},
			"web", "--harness", "claude-code", "--budget-tokens", "20000"),
		refused(ExitUsage, "web", "--budget-tokens", "-1"),
	}},
	{"hiloop session budget", parser(newCmdSessionBudget), []flagCase{
		ok(&BudgetOptions{Target: "s1", Tokens: 90000}, "s1", "--tokens", "90000"),
		ok(&BudgetOptions{Target: "s1", Output: "yaml"}, "s1", "--clear", "-o", "yaml"),
		refused(ExitUsage, "s1"),
		refused(ExitUsage, "s1", "--tokens", "1", "--clear"),
		refused(ExitUsage, "s1", "--tokens", "1e3"),
		refused(ExitNotFound, "Bad/Id", "--tokens", "1"),
	}},
	{"hiloop session list", parser(newCmdSessionList), []flagCase{
		ok(&SessionListOptions{Output: "table"}),
		ok(&SessionListOptions{Sandbox: "web", Output: "json"}, "web", "-o", "json"),
		refused(ExitUsage, "web", "db"),
	}},
	{"hiloop session get", parser(newCmdSessionGet), []flagCase{
		ok(&SessionGetOptions{Session: "s1", Output: "table"}, "s1"),
		refused(ExitUsage),
		refused(ExitNotFound, "Bad/Id"),
	}},
	{"hiloop session prompt", parser(newCmdSessionPrompt), []flagCase{
		ok(&SessionPromptOptions{Session: "s1", Text: "say hello", Output: "table"}, "s1", "say", "hello"),
		ok(&SessionPromptOptions{Session: "s1", Text: "fix the tests\n", Output: "table"}, "s1", "-"),
		ok(&SessionPromptOptions{Session: "s1", Text: "-v is a flag", Thoughts: true, IdempotencyKey: "k", Output: "json"},
			"--thoughts", "--idempotency-key", "k", "-o", "json", "s1", "--", "-v", "is", "a", "flag"),
		refused(ExitUsage, "s1"),
		refused(ExitUsage, "s1", " "),
		refused(ExitUsage, "s1", strings.Repeat("x", api.MaxPromptBytes+1)),
		refused(ExitUsage, "-o", "xml", "s1", "hi"),
		refused(ExitNotFound, "Bad/Id", "hi"),
	}},
	{"hiloop sandbox egress log", parser(newCmdSandboxEgressLog), []flagCase{
		ok(&SandboxEgressLogOptions{Name: "web", Output: "table"}, "web"),
		ok(&SandboxEgressLogOptions{Name: "web", After: 42, Follow: true, Output: "json"}, "web", "--after", "42", "-f", "-o", "json"),
		ok(&SandboxEgressLogOptions{Name: "web", Follow: true, Output: "yaml"}, "--follow", "web", "-o", "yaml"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "db"),
		refused(ExitUsage, "web", "--after", "-1"),
		refused(ExitUsage, "web", "-o", "xml"),
	}},
	{"hiloop session events", parser(newCmdSessionEvents), []flagCase{
		ok(&SessionEventsOptions{Session: "s1", Output: "table"}, "s1"),
		ok(&SessionEventsOptions{Session: "s1", After: 120, Follow: true, Output: "json"}, "s1", "--after", "120", "-f", "-o", "json"),
		refused(ExitUsage),
		refused(ExitUsage, "s1", "--after", "-1"),
		refused(ExitNotFound, "Bad/Id"),
	}},
	{"hiloop chat", parser(newCmdChat), []flagCase{
		ok(&ChatOptions{Sandbox: "web", Operator: defaultOperator()}, "web"),
		ok(&ChatOptions{Sandbox: "web", Session: "k3x9q2m7v4b8", Operator: defaultOperator()}, "web", "--session", "k3x9q2m7v4b8"),
		ok(&ChatOptions{Sandbox: "web", New: true, Harness: "fake", Policy: api.PolicyAsk, Operator: defaultOperator()},
			"web", "--new", "--harness", "fake", "--policy", "ask"),
		ok(&ChatOptions{Sandbox: "web", Harness: "codex", Operator: defaultOperator()}, "web", "--harness", "codex"),
		refused(ExitUsage),
		refused(ExitUsage, "web", "db"),
		refused(ExitUsage, "Web"),
		refused(ExitUsage, "web", "--session", "k3x9", "--new"),
		refused(ExitUsage, "web", "--session", "k3x9", "--harness", "fake"),
		refused(ExitUsage, "web", "--session", "k3x9", "--policy", "ask"),
		refused(ExitNotFound, "web", "--session", "K3X9"),
		refused(ExitUsage, "web", "--policy", "sometimes"),
	}},
	{"hiloop session approve", parser(newCmdSessionApprove), []flagCase{
		ok(&SessionAnswerOptions{Session: "s1", Request: "tc1", Kind: api.OptionAllowOnce, Operator: defaultOperator()}, "s1", "tc1"),
		ok(&SessionAnswerOptions{Session: "s1", Request: "tc1", Kind: api.OptionAllowOnce, Operator: "alice@laptop"}, "s1", "tc1", "--operator", "alice@laptop"),
		refused(ExitUsage, "s1", "tc1", "--operator", "alice\x1b[2J"),
		refused(ExitUsage, "s1", "tc1", "--operator", strings.Repeat("a", api.MaxOperatorBytes+1)),
		ok(&SessionAnswerOptions{Session: "s1", Request: "tc1", Kind: api.OptionAllowAlways, Operator: defaultOperator(), Output: "json"},
			"s1", "tc1", "--option", api.OptionAllowAlways, "-o", "json"),
		refused(ExitUsage, "s1"),
		refused(ExitUsage, "s1", "tc1", "--option", api.OptionRejectOnce),
	}},
	{"hiloop session deny", parser(newCmdSessionDeny), []flagCase{
		ok(&SessionAnswerOptions{Session: "s1", Request: "tc1", Kind: api.OptionRejectOnce, Operator: defaultOperator()}, "s1", "tc1"),
		ok(&SessionAnswerOptions{Session: "s1", Request: "tc1", Kind: api.OptionRejectAlways, Operator: defaultOperator()}, "s1", "tc1", "--option", api.OptionRejectAlways),
		refused(ExitUsage, "s1", "tc1", "--option", api.OptionAllowOnce),
	}},
	{"hiloop session cancel", parser(newCmdSessionCancel), []flagCase{
		ok(&SessionCancelOptions{Session: "s1"}, "s1"),
		ok(&SessionCancelOptions{Session: "s1", Output: "yaml"}, "s1", "-o", "yaml"),
		refused(ExitUsage),
		refused(ExitNotFound, "B@d"),
	}},
	{"hiloop session delete", parser(newCmdSessionDelete), []flagCase{
		ok(&SessionDeleteOptions{Session: "s1"}, "s1"),
		refused(ExitUsage, "s1", "s2"),
	}},
	{"hiloop image build", parser(newCmdImageBuild), []flagCase{
		ok(&ImageBuildOptions{Name: "base", Output: "table"}, "base"),
		ok(&ImageBuildOptions{Name: "base", Post: api.ImageBuildPost{Force: true}, Output: "json"}, "base", "--force", "-o", "json"),
		ok(&ImageBuildOptions{Name: "tools", Post: api.ImageBuildPost{From: "base", Steps: []string{"apt-get install -y jq", "make"}},
			Runs: []string{"apt-get install -y jq", "make"}, Verbose: true, Output: "table"},
			"tools", "--from", "base", "--run", "apt-get install -y jq", "--run", "make", "-v"),
		refused(ExitUsage),
		refused(ExitUsage, "tools", "--from", "base"),
		refused(ExitUsage, "tools", "--run", "make"),
		refused(ExitUsage, "tools", "--from", "base", "--run", "make", "--script", "x.sh"),
		refused(ExitUsage, "tools", "--from", "base", "--script", "/nonexistent/x.sh"),
		refused(ExitUsage, "tools", "--from", "base", "--run", " "),
	}},
	{"hiloop image get", parser(newCmdImageGet), []flagCase{
		ok(&ImageGetOptions{Name: "tools", Output: "json"}, "tools", "-o", "json"),
		refused(ExitUsage),
	}},
	{"hiloop image delete", parser(newCmdImageDelete), []flagCase{
		ok(&ImageDeleteOptions{Name: "tools"}, "tools"),
		refused(ExitUsage, "a", "b"),
	}},
	{"hiloop image import", parser(newCmdImageImport), []flagCase{
		ok(&ImageImportOptions{Name: "tools", File: "tools.tar", Force: true, Output: "table"}, "tools", "tools.tar", "--force"),
		refused(ExitUsage, "tools"),
	}},
	{"hiloop image pull", parser(newCmdImagePull), []flagCase{
		ok(&ImagePullOptions{Name: "py", Post: api.ImagePullPost{Ref: "localhost:5000/py:1"}, Output: "table"}, "py", "localhost:5000/py:1"),
		refused(ExitUsage, "py"),
		refused(ExitUsage, "py", "not a ref"),
	}},
	{"hiloop image list", parser(newCmdImageList), []flagCase{
		ok(&ImageListOptions{Output: "table"}),
		refused(ExitUsage, "base"),
	}},
	{"hiloop ssh-key add", parser(newCmdSSHKeyAdd), []flagCase{
		ok(&SSHKeyAddOptions{Output: "table"}),
		ok(&SSHKeyAddOptions{File: "id.pub", Name: "laptop", Output: "json"}, "id.pub", "--name", "laptop", "-o", "json"),
		refused(ExitUsage, "a.pub", "b.pub"),
	}},
	{"hiloop ssh-key list", parser(newCmdSSHKeyList), []flagCase{
		ok(&SSHKeyListOptions{Output: "table"}),
		ok(&SSHKeyListOptions{AllUsers: true, Output: "table"}, "--all-users"),
		refused(ExitUsage, "laptop"),
	}},
	{"hiloop ssh-key remove", parser(newCmdSSHKeyRemove), []flagCase{
		ok(&SSHKeyRemoveOptions{Name: "laptop"}, "laptop"),
		refused(ExitUsage),
	}},
	{"hiloop user add", parser(newCmdUserAdd), []flagCase{
		ok(&UserAddOptions{Post: api.UsersPost{Name: "alice"}, Output: "table"}, "alice"),
		ok(&UserAddOptions{Post: api.UsersPost{Name: "bob", Admin: true, TrustTokenTTL: "2h"}, Output: "json"}, "bob", "--admin", "--expires", "2h", "-o", "json"),
		refused(ExitUsage),
		refused(ExitUsage, "Alice"),
		refused(ExitUsage, "a", "b"),
	}},
	{"hiloop user list", parser(newCmdUserList), []flagCase{
		ok(&UserListOptions{Output: "table"}),
		ok(&UserListOptions{Output: "yaml"}, "-o", "yaml"),
		refused(ExitUsage, "alice"),
	}},
	{"hiloop user remove", parser(newCmdUserRemove), []flagCase{
		ok(&UserRemoveOptions{Name: "alice"}, "alice"),
		refused(ExitUsage),
	}},
	{"hiloop user trust-token", parser(newCmdUserTrustToken), []flagCase{
		ok(&UserTrustTokenOptions{Name: "alice", Output: "table"}, "alice"),
		ok(&UserTrustTokenOptions{Name: "alice", Expires: "7d", Output: "table"}, "alice", "--expires", "7d"),
		refused(ExitUsage),
	}},
	{"hiloop user token create", parser(newCmdUserTokenCreate), []flagCase{
		ok(&UserTokenCreateOptions{User: "alice", Post: api.TokensPost{Name: "ci"}}, "alice", "--name", "ci"),
		ok(&UserTokenCreateOptions{User: "alice", Post: api.TokensPost{Name: "ci", TTL: "30d"}, Output: "json"}, "alice", "--name", "ci", "--expires", "30d", "-o", "json"),
		refused(ExitUsage, "alice"),
		refused(ExitUsage, "alice", "--name", "CI"),
		refused(ExitUsage, "--name", "ci"),
	}},
	{"hiloop user token list", parser(newCmdUserTokenList), []flagCase{
		ok(&UserTokenListOptions{User: "alice", Output: "table"}, "alice"),
		refused(ExitUsage),
	}},
	{"hiloop user token revoke", parser(newCmdUserTokenRevoke), []flagCase{
		ok(&UserTokenRevokeOptions{User: "alice", Token: "ci"}, "alice", "ci"),
		refused(ExitUsage, "alice"),
	}},
	{"hiloop whoami", parser(newCmdWhoAmI), []flagCase{
		ok(&WhoAmIOptions{Output: "table"}),
		ok(&WhoAmIOptions{Output: "json"}, "-o", "json"),
		refused(ExitUsage, "x"),
	}},
	{"hiloop ssh-config", parser(newCmdSSHConfig), []flagCase{
		ok(&SSHConfigOptions{Names: []string{}}),
		ok(&SSHConfigOptions{Names: []string{"web", "db"}}, "web", "db"),
		refused(ExitUsage, "--user", "me"),
	}},
}

// TestCommandFlags parses representative command lines of every command into its options, and
// checks that a bad line is a usage error (or the error the line earns) before anything runs.
func TestCommandFlags(t *testing.T) {
	for _, cmd := range commandFlagCases {
		for _, tc := range cmd.cases {
			f := &Factory{IO: &iostreams.IOStreams{In: strings.NewReader("fix the tests\n"), Out: io.Discard, ErrOut: io.Discard},
				Host: "unix:///nonexistent/sandboxd.sock"}
			name, got, err := cmd.parse(f, tc.args)
			line := strings.Join(append([]string{cmd.path}, tc.args...), " ")
			if !strings.HasSuffix(cmd.path, " "+name) {
				t.Fatalf("the cases of %s build the command %s", cmd.path, name)
			}
			if tc.want == nil {
				if got != nil || exitCode(err) != tc.exit {
					t.Errorf("%s: ran with %+v (error %v, exit %d); want exit %d before running", line, got, err, exitCode(err), tc.exit)
				}
				continue
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s:\n got %+v (error %v)\nwant %+v", line, got, err, tc.want)
			}
		}
	}
}

// A backquoted word in a flag's usage becomes the name of its value in --help
// ("--image hiloop image list"): the usages name commands without them.
func TestFlagUsagesHaveNoBackquotes(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(fl *pflag.Flag) {
			if strings.Contains(fl.Usage, "`") {
				t.Errorf("%s --%s: usage %q has a backquote", c.CommandPath(), fl.Name, fl.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewCmdRoot(&Factory{}))
}

// TestEveryCommandHasFlagCases walks the command tree: a command without cases above fails.
func TestEveryCommandHasFlagCases(t *testing.T) {
	covered := map[string]bool{}
	for _, cmd := range commandFlagCases {
		covered[cmd.path] = true
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !covered[c.CommandPath()] {
			t.Errorf("%s has no cases in commandFlagCases", c.CommandPath())
		}
		delete(covered, c.CommandPath())
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := NewCmdRoot(&Factory{})
	root.Use = "hiloop"
	walk(root)
	for path := range covered {
		t.Errorf("commandFlagCases has %q, which is no command", path)
	}
}

func ptrTo[T any](v T) *T { return &v }
