// Command createbench is bench/exec.sh's measure of create → first exec through the API alone,
// without the two CLI processes the command-line figure starts (each of which costs what a
// process start costs on the machine): RUNS times, it waits until the daemon has its spares
// ready, then times POST /v1/sandboxes and an exec of `true` in the new sandbox, and deletes it
// outside the timing. It prints one line: the median and p95 in milliseconds.
//
//	createbench HOST IMAGE RUNS [CREATE-JSON]   CREATE-JSON: more of the create's fields, e.g. {"cpus":1.5}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "createbench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 3 || len(args) > 4 {
		return fmt.Errorf("usage: createbench HOST IMAGE RUNS [CREATE-JSON]")
	}
	runs, err := strconv.Atoi(args[2])
	if err != nil || runs < 1 {
		return fmt.Errorf("RUNS: want a positive number, got %q", args[2])
	}
	post := api.SandboxesPost{Image: args[1]}
	if len(args) == 4 {
		if err := json.Unmarshal([]byte(args[3]), &post); err != nil {
			return fmt.Errorf("CREATE-JSON: %w", err)
		}
	}
	c, err := client.New(args[0], "")
	if err != nil {
		return err
	}
	ctx := context.Background()
	var ms []float64
	for i := range runs {
		if err := sparesReady(ctx, c); err != nil {
			return err
		}
		post.Name = "createbench-" + strconv.Itoa(i)
		start := time.Now()
		if _, err := c.CreateSandbox(ctx, post); err != nil {
			return err
		}
		res, err := c.Exec(ctx, post.Name, api.ExecRequest{Command: []string{"true"}}, client.ExecIO{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("true exited %d", res.ExitCode)
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		if err := c.DeleteSandbox(ctx, post.Name, false); err != nil {
			return err
		}
	}
	slices.Sort(ms)
	fmt.Printf("%.1f %.1f\n", ms[len(ms)/2], ms[min(len(ms)-1, len(ms)*95/100)])
	return nil
}

// sparesReady waits until every spare the daemon keeps is ready (at once if it keeps none).
func sparesReady(ctx context.Context, c *client.Client) error {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := c.Version(ctx)
		if err != nil {
			return err
		}
		if v.Spares.Ready >= v.Spares.Wanted {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon's spares are not ready after a minute: %+v", v.Spares)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
