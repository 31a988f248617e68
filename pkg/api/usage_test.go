package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// Budgets are checked wherever a request names one: at sandbox and session create and in the
// budget PUTs, with the field's name in the message.
func TestBudgetValidation(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		what string
		err  error
		want string // "" when accepted
	}{
		{"sandbox none", (&SandboxesPost{Name: "w"}).Normalize(), ""},
		{"sandbox some", (&SandboxesPost{Name: "w", ModelBudgetTokens: 5000}).Normalize(), ""},
		{"sandbox max", (&SandboxesPost{Name: "w", ModelBudgetTokens: MaxBudgetTokens}).Normalize(), ""},
		{"sandbox negative", (&SandboxesPost{Name: "w", ModelBudgetTokens: -1}).Normalize(), "invalid model_budget_tokens -1: use 0 (no budget) to 1000000000000000 tokens"},
		{"sandbox too large", (&SandboxesPost{Name: "w", ModelBudgetTokens: MaxBudgetTokens + 1}).Normalize(), "invalid model_budget_tokens 1000000000000001"},
		{"session none", (&SessionsPost{Sandbox: "w"}).Normalize(), ""},
		{"session some", (&SessionsPost{Sandbox: "w", BudgetTokens: 1}).Normalize(), ""},
		{"session negative", (&SessionsPost{Sandbox: "w", BudgetTokens: -5}).Normalize(), "invalid budget_tokens -5"},
		{"put", BudgetPut{Tokens: n(100)}.Validate(), ""},
		{"put zero removes", BudgetPut{Tokens: n(0)}.Validate(), ""},
		{"put missing", BudgetPut{}.Validate(), "tokens is required"},
		{"put negative", BudgetPut{Tokens: n(-1)}.Validate(), "invalid tokens -1"},
		{"put too large", BudgetPut{Tokens: n(MaxBudgetTokens + 1)}.Validate(), "invalid tokens"},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: refused: %v", tc.what, tc.err)
		case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.what, tc.err, tc.want)
		case tc.err != nil:
			clientError(t, tc.what, tc.err, CodeInvalidArgument)
		}
	}
}

// A budget PUT without tokens is told apart from one that removes the budget.
func TestBudgetPutDecodesMissingTokens(t *testing.T) {
	var missing, zero BudgetPut
	if err := json.Unmarshal([]byte(`{}`), &missing); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"tokens":0}`), &zero); err != nil {
		t.Fatal(err)
	}
	if missing.Validate() == nil || zero.Validate() != nil {
		t.Errorf("{} validates to %v, {\"tokens\":0} to %v; want an error, then none", missing.Validate(), zero.Validate())
	}
}

// ModelUsage's totals sit at the top of the object, beside the budget, as docs/api.md shows.
func TestModelUsageJSON(t *testing.T) {
	left := int64(3766)
	b, err := json.Marshal(ModelUsage{UsageTotals: UsageTotals{InputTokens: 1000, OutputTokens: 200, CacheReadTokens: 30,
		CacheWriteTokens: 4, TotalTokens: 1234, Requests: 3}, BudgetTokens: 5000, RemainingTokens: &left})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input_tokens":1000,"output_tokens":200,"cache_read_tokens":30,"cache_write_tokens":4,"total_tokens":1234,"requests":3,"budget_tokens":5000,"remaining_tokens":3766}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(ModelUsage{})
	if strings.Contains(string(b), "remaining_tokens") {
		t.Errorf("no budget, yet %s", b)
	}
}
