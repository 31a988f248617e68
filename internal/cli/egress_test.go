package cli

import (
	"reflect"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

func TestApplyEgressChanges(t *testing.T) {
	base := api.Egress{Mode: api.EgressOpen, Allow: []string{"a.test", "b.test"}, Deny: []string{"x.test"}}
	for _, tc := range []struct {
		name  string
		opts  SandboxEgressOptions
		want  api.Egress
		warns int
	}{
		{"mode only", SandboxEgressOptions{Mode: api.EgressClosed},
			api.Egress{Mode: api.EgressClosed, Allow: []string{"a.test", "b.test"}, Deny: []string{"x.test"}}, 0},
		{"add and remove", SandboxEgressOptions{Allow: []string{"c.test", "a.test"}, RemoveAllow: []string{"b.test"}, Deny: []string{"y.test"}},
			api.Egress{Mode: api.EgressOpen, Allow: []string{"a.test", "c.test"}, Deny: []string{"x.test", "y.test"}}, 0},
		{"remove what is not there", SandboxEgressOptions{RemoveDeny: []string{"z.test"}},
			api.Egress{Mode: api.EgressOpen, Allow: []string{"a.test", "b.test"}, Deny: []string{"x.test"}}, 1},
		{"clear, then add", SandboxEgressOptions{Clear: true, Allow: []string{"c.test"}},
			api.Egress{Mode: api.EgressOpen, Allow: []string{"c.test"}}, 0},
		{"clear all", SandboxEgressOptions{Clear: true, Mode: api.EgressOpen}, api.Egress{Mode: api.EgressOpen}, 0},
	} {
		warns := 0
		got := applyEgressChanges(base, &tc.opts, func(string) { warns++ })
		if len(got.Allow) == 0 {
			got.Allow = nil
		}
		if len(got.Deny) == 0 {
			got.Deny = nil
		}
		if !reflect.DeepEqual(got, tc.want) || warns != tc.warns {
			t.Errorf("%s: got %+v with %d warnings, want %+v with %d", tc.name, got, warns, tc.want, tc.warns)
		}
	}
	// The policy it started from is left alone.
	if want := []string{"a.test", "b.test"}; !reflect.DeepEqual(base.Allow, want) {
		t.Errorf("base changed: %v", base.Allow)
	}
}
