package controller

import (
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// quotaPrefix starts the ResourceQuota admission plugin's refusal, e.g. `pods "web" is
// forbidden: exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=0,
// limited: requests.cpu=1`.
const quotaPrefix = "exceeded quota: "

// QuotaError recognises the API server's refusal of an object because it would exceed a
// ResourceQuota: quota is the quota's name, msg the refusal from "exceeded quota:" on, which
// names what was requested, used and limited. ok is false for any other error, including the
// quota plugin's other refusals (a quota whose usage is not yet known), which are transient.
func QuotaError(err error) (quota string, msg string, ok bool) {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) || !apierrors.IsForbidden(err) {
		return "", "", false
	}
	text := status.Status().Message
	i := strings.Index(text, quotaPrefix)
	if i < 0 {
		return "", "", false
	}
	msg = text[i:]
	rest := msg[len(quotaPrefix):]
	end := strings.Index(rest, ",")
	if end <= 0 {
		return "", "", false
	}
	return rest[:end], msg, true
}
