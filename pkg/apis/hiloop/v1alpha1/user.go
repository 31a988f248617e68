package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UserSpec is who a hiloop user is: what a cluster admin manages, with kubectl or GitOps.
type UserSpec struct {
	// Admin users see and act on every user's resources, and manage users.
	// +optional
	Admin bool `json:"admin,omitempty"`
	// Namespace is the Kubernetes namespace the user's Sandboxes live in, e.g. "team-a". It
	// cannot change: the user's sandboxes would be left behind in the old one.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a user's namespace cannot change"
	Namespace string `json:"namespace"`
}

// UserTrustToken is a pending trust token: one-time, traded for a client certificate.
type UserTrustToken struct {
	// Hash is the hex SHA-256 of the token; the token itself is shown once and never kept.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Hash string `json:"hash"`
	// Expires is when the token stops being good.
	Expires metav1.Time `json:"expires"`
}

// UserToken is an API token, sent as a bearer token.
type UserToken struct {
	// Name tells the token from the user's others, e.g. "ci".
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]{0,62}$`
	Name string `json:"name"`
	// Hash is the hex SHA-256 of the token's value; the value is shown once and never kept.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Hash string `json:"hash"`
	// Created is when the token was made.
	Created metav1.Time `json:"created"`
	// Expires is when the token stops being good; absent: when it is revoked.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`
	// LastUsed is when a front last authenticated a request with the token, to the minute: each
	// front replica writes it at most once a minute per token, after the request, never in its
	// way.
	// +optional
	LastUsed *metav1.Time `json:"lastUsed,omitempty"`
}

// UserCertificate is a client certificate a front issued to the user.
type UserCertificate struct {
	// Fingerprint is "SHA256:" and the unpadded base64 of the SHA-256 of the certificate's DER.
	Fingerprint string `json:"fingerprint"`
	// Issued is when the certificate was issued.
	Issued metav1.Time `json:"issued"`
	// Expires is the certificate's NotAfter.
	Expires metav1.Time `json:"expires"`
}

// UserStatus is a user's credentials, as hashes and fingerprints only. Only the front writes
// it, through the status subresource.
type UserStatus struct {
	// TrustTokens holds the user's pending trust token (at most one).
	// +optional
	// +listType=map
	// +listMapKey=hash
	TrustTokens []UserTrustToken `json:"trustTokens,omitempty"`
	// Tokens are the user's API tokens, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Tokens []UserToken `json:"tokens,omitempty"`
	// Certificates are the client certificates issued to the user.
	// +optional
	// +listType=map
	// +listMapKey=fingerprint
	Certificates []UserCertificate `json:"certificates,omitempty"`
}

// User is a hiloop user of a cluster: the name they are known by (metadata.name, the hiloop
// user naming rule), whether they are an admin, the namespace their sandboxes live in, and the
// credentials the fronts issued them. Every front replica reads Users from its informer cache,
// so all of them know the same users, and a credential revoked on one stops working on all.
//
// The credentials are in status, behind the status subresource, although no controller
// observes them into being: that split is a privilege boundary. Whoever may create or update
// Users (a cluster admin, a GitOps tool) decides who exists and who is an admin, but cannot
// mint a credential (a token hash of a value they know) without update on users/status,
// which only the front holds; a create or an apply of the spec never touches them. All of a
// user's credentials are in one place, so that a trust token is consumed and the certificate
// it bought is recorded in one write, guarded by the object's resourceVersion: two fronts
// trading one token at once cannot both succeed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=hlu,categories=hiloop
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z][a-z0-9-]{0,62}$')",message="a user's name is 1-63 characters of a-z, 0-9 and '-', starting with a letter"
// +kubebuilder:printcolumn:name="Admin",type=boolean,JSONPath=`.spec.admin`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type User struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   UserSpec   `json:"spec"`
	Status UserStatus `json:"status,omitempty"`
}

// UserList is a list of Users.
//
// +kubebuilder:object:root=true
type UserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []User `json:"items"`
}
