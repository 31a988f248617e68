package controller

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestQuotaErrorText: QuotaError on refusals as the API server words them (the first captured
// from kube-apiserver v1.37 by TestQuota, which also feeds it the live error), and on the
// Forbidden errors that are not a full quota.
func TestQuotaErrorText(t *testing.T) {
	forbidden := func(msg string) error {
		return apierrors.NewForbidden(corev1.Resource("pods"), "probe", errors.New(msg))
	}
	for _, tc := range []struct {
		name       string
		err        error
		quota, msg string
		ok         bool
	}{
		{name: "cpu", err: forbidden("exceeded quota: team-compute, requested: cpu=2, used: cpu=0, limited: cpu=1"),
			quota: "team-compute", msg: "exceeded quota: team-compute, requested: cpu=2, used: cpu=0, limited: cpu=1", ok: true},
		{name: "several resources", err: forbidden("exceeded quota: q1, requested: limits.memory=8Gi,pods=1, used: limits.memory=0,pods=1, limited: limits.memory=4Gi,pods=1"),
			quota: "q1", msg: "exceeded quota: q1, requested: limits.memory=8Gi,pods=1, used: limits.memory=0,pods=1, limited: limits.memory=4Gi,pods=1", ok: true},
		{name: "wrapped", err: fmt.Errorf("create pod: %w", forbidden("exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1")),
			quota: "q", msg: "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1", ok: true},
		{name: "usage not yet known", err: forbidden("status unknown for quota: q, resources: cpu")},
		{name: "rbac", err: forbidden(`User "bob" cannot create resource "pods" in API group "" in the namespace "team"`)},
		{name: "not forbidden", err: apierrors.NewConflict(corev1.Resource("pods"), "probe", errors.New("exceeded quota: q, requested: x"))},
		{name: "not an API error", err: errors.New("exceeded quota: q, requested: x")},
		{name: "nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quota, msg, ok := QuotaError(tc.err)
			if quota != tc.quota || msg != tc.msg || ok != tc.ok {
				t.Errorf("QuotaError = %q, %q, %v; want %q, %q, %v", quota, msg, ok, tc.quota, tc.msg, tc.ok)
			}
		})
	}
}
