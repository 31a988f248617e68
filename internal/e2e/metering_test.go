package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/pkg/api"
)

const meteringCheckUsage = "usage: meteringcheck PROV SANDBOX INPUT OUTPUT CACHE-READ CACHE-WRITE [VAR]"

// cmdMeteringCheck: meteringcheck PROV SANDBOX INPUT OUTPUT CACHE-READ CACHE-WRITE [VAR] checks
// the model route's metering against the fake provider PROV, which reports those tokens in every
// answer (its -input-tokens... flags). A harness makes side requests (Claude Code: a title per
// prompt, prompt suggestions) in numbers and at times of its own, some after its turn has ended,
// so the check first waits up to 30 s for the route to be quiet: every request the fake received
// has been answered by the route (SANDBOX's egress log has a model-route record answered without
// error for each). Then `hiloop usage -o json` must count, to the token, what the fake reported for each
// /v1/messages request it answered, all of it attributed to a session, and `hiloop session get
// ID -o json` of each session must show what the report gives it. VAR is set to how many such
// requests the fake answered: two checks around a refused prompt show that none reached it.
func cmdMeteringCheck(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 6 || len(args) > 7 {
		ts.Fatalf(meteringCheckUsage)
	}
	prov, sandbox := args[0], args[1]
	var per [4]int64
	for i := range per {
		n, err := strconv.ParseInt(args[2+i], 10, 64)
		if err != nil {
			ts.Fatalf("%s: %v", meteringCheckUsage, err)
		}
		per[i] = n
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// In this order, equal counts before and after mean that the usage read in between
		// holds every request the fake had received, and no other.
		ended := routeEnded(ts, sandbox)
		var rep api.UsageReport
		hiloopJSON(ts, &rep, "usage", "-o", "json")
		sessions := map[string]api.ModelUsage{}
		for _, g := range rep.BySession {
			if g.Session != "" {
				var se api.Session
				hiloopJSON(ts, &se, "session", "get", g.Session, "-o", "json")
				if se.ModelUsage != nil {
					sessions[g.Session] = *se.ModelUsage
				}
			}
		}
		received, answered := fakeMessages(ts, prov)
		if again := routeEnded(ts, sandbox); ended != again || ended != received {
			if time.Now().After(deadline) {
				ts.Fatalf("meteringcheck: the model route is not quiet after 30s: the fake received %d requests, the route answered %d", received, again)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		n := int64(answered)
		want := api.UsageTotals{InputTokens: n * per[0], OutputTokens: n * per[1], CacheReadTokens: n * per[2],
			CacheWriteTokens: n * per[3], TotalTokens: n * (per[0] + per[1] + per[2] + per[3])}
		got := rep.Total
		got.Requests = 0 // refused requests count too, and never reach the fake
		if got != want {
			ts.Fatalf("meteringcheck: the fake answered %d requests reporting %v tokens each; hiloop usage counts %+v, want %+v", n, per, got, want)
		}
		for _, g := range rep.BySession {
			if g.Session == "" {
				ts.Fatalf("meteringcheck: %d tokens of sandbox %s are attributed to no session", g.TotalTokens, g.Sandbox)
			}
			// Requests the route refused never reach the fake, so nothing says they are over:
			// the tokens are compared, not the requests.
			got, want := sessions[g.Session].UsageTotals, g.UsageTotals
			got.Requests, want.Requests = 0, 0
			if got != want {
				ts.Fatalf("meteringcheck: session get %s shows %+v; hiloop usage gives it %+v", g.Session, got, want)
			}
		}
		ts.Logf("meteringcheck: %d model requests answered, %d tokens, %d requests counted", n, got.TotalTokens, rep.Total.Requests)
		if len(args) == 7 {
			ts.Setenv(args[6], strconv.Itoa(answered))
		}
		return
	}
}

// routeEnded counts the requests of the sandbox the model route forwarded and answered: its
// egress log's model-route records with no error and bytes sent back. A request cut off before
// it reached the provider (its harness killed by a daemon restart) has no error either, as the
// route had answered nothing, but no bytes.
func routeEnded(ts *testscript.TestScript, sandbox string) int {
	out := hiloopOutput(ts, "sandbox", "egress", "log", sandbox, "-o", "json")
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec api.EgressRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			ts.Fatalf("egress log line %q: %v", sc.Text(), err)
		}
		if rec.Kind == gateway.KindModelRoute && rec.Error == "" && rec.BytesDown > 0 {
			n++
		}
	}
	return n
}

// fakeMessages counts the requests the fake provider received, and those to …/v1/messages it
// answered with 200.
func fakeMessages(ts *testscript.TestScript, prov string) (received, answered int) {
	resp, err := http.Get(ts.Getenv(prov+"_URL") + "/_fake/requests")
	ts.Check(err)
	defer resp.Body.Close()
	var reqs []struct {
		Path   string `json:"path"`
		Status int    `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		ts.Fatalf("fake provider %s's requests: %v", prov, err)
	}
	for _, r := range reqs {
		if strings.HasSuffix(r.Path, "/v1/messages") && r.Status == http.StatusOK {
			answered++
		}
	}
	return len(reqs), answered
}

// hiloopOutput runs hiloop with args and returns its stdout; a failure fails the script.
func hiloopOutput(ts *testscript.TestScript, args ...string) []byte {
	bin, err := lookPath("hiloop", ts.Getenv("PATH"))
	ts.Check(err)
	cmd := exec.Command(bin, args...)
	cmd.Env = scriptEnv(ts)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		ts.Fatalf("hiloop %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// hiloopJSON runs hiloop with args (an -o json command) and decodes its stdout into v.
func hiloopJSON(ts *testscript.TestScript, v any, args ...string) {
	out := hiloopOutput(ts, args...)
	if err := json.Unmarshal(out, v); err != nil {
		ts.Fatalf("hiloop %s: %v in %s", strings.Join(args, " "), err, fmt.Sprintf("%.500s", out))
	}
}
