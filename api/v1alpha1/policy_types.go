package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformRunPolicySpec is the governance every TerraformRun in the
// policy's scope must meet, written once by a platform team or a
// namespace's owners (docs/policies.md).
type TerraformRunPolicySpec struct {
	// Approval is the approval policy the runs in scope must meet, with
	// the meaning of a TerraformRun's spec.approval fields. It is combined
	// with the run's own spec.approval and every other policy in scope,
	// and the strictest wins: Manual over Auto, the most required
	// approvals, the approvers every policy names, self-approval forbidden
	// when any forbids it, rejection by one when any says so, the shortest
	// timeout, every rule and every change window (each policy's Allow
	// windows must be open at once). A field left out constrains nothing.
	// Per-plan decisions are not policy: people decide through
	// TerraformRunApprovals and the engines' approval paths.
	// +optional
	Approval ApprovalPolicy `json:"approval,omitempty"`
}

// ApprovalPolicy is spec.approval's policy half, without defaults: what a
// policy leaves out, it does not constrain.
//
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || (has(self.approvers.users) && size(self.approvers.users) > 0) || (has(self.approvers.groups) && size(self.approvers.groups) > 0)",message="spec.approval.approvers lists no user and no group, so nobody could ever approve a plan, not even a cluster admin; name the users or groups who may approve, or leave approvers out"
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || (has(self.approvers.groups) && size(self.approvers.groups) > 0) || !has(self.requiredApprovals) || self.requiredApprovals <= (has(self.approvers.users) ? size(self.approvers.users) : 0)",message="spec.approval.requiredApprovals is more than the number of users spec.approval.approvers names (and it names no group), so no plan could ever be approved; lower requiredApprovals or name more approvers"
type ApprovalPolicy struct {
	// Mode Manual makes every run in scope wait at the approval gate;
	// Auto constrains nothing (a run's own mode decides).
	// +optional
	Mode ApprovalMode `json:"mode,omitempty"`
	// Timeout rejects a plan that has waited this long for approval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('8760h')",message="spec.approval.timeout must be positive and at most 8760h (one year), for example 30m or 24h"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// RequiredApprovals is how many distinct users must approve a plan.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	RequiredApprovals int32 `json:"requiredApprovals,omitempty"`
	// Approvers, when set, are the only users and groups whose decisions
	// count.
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
	// SelfApproval Forbidden bars every author of a change (status.run.authors)
	// from approving it.
	// +optional
	SelfApproval SelfApproval `json:"selfApproval,omitempty"`
	// Rejection Any lets one rejection by an allowed approver reject a
	// plan; Quorum needs requiredApprovals of them.
	// +optional
	Rejection RejectionRule `json:"rejection,omitempty"`
	// Rules decide a plan's approval from what it changes
	// (docs/policies.md), as spec.approval.rules do; they are named
	// <policy>/<rule> in a run's status (cluster/<policy>/<rule> for a
	// ClusterTerraformRunPolicy's).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Rules []ApprovalRule `json:"rules,omitempty"`
	// Windows say when an approved plan may apply, as spec.approval.windows
	// do; a run in scope applies only when every policy's windows (and its
	// own) let it.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Windows []ChangeWindow `json:"windows,omitempty"`
}

// ClusterTerraformRunPolicySpec is a TerraformRunPolicySpec for every
// namespace its selector picks.
type ClusterTerraformRunPolicySpec struct {
	// NamespaceSelector picks the namespaces whose TerraformRuns the policy
	// governs, by the namespaces' labels, which a namespace's tenants
	// cannot change (unset: every namespace).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	TerraformRunPolicySpec `json:",inline"`
}

// PolicyStatus is what the manager found of a policy.
type PolicyStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is True when every rule compiles and every window
	// parses, False (reason InvalidSpec) naming the one that does not; a
	// run the policy governs is held at its gate until it is fixed.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TerraformRunPolicy governs every TerraformRun in its namespace: each of
// them must meet it, with its own spec.approval and every other policy
// that applies (the strictest wins). Writing it is a policy admin's right
// (ClusterRole opr8r-policy-admin): the runs' editors may read it, never
// change it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tfpolicy,categories=opr8r
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.approval.mode`
// +kubebuilder:printcolumn:name="Approvals",type=integer,JSONPath=`.spec.approval.requiredApprovals`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerraformRunPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the policy.
	Spec TerraformRunPolicySpec `json:"spec"`
	// Status says whether it compiles.
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// TerraformRunPolicyList is a list of TerraformRunPolicies.
//
// +kubebuilder:object:root=true
type TerraformRunPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []TerraformRunPolicy `json:"items"`
}

// ClusterTerraformRunPolicy governs every TerraformRun in the namespaces
// its selector picks, with the same meaning as a TerraformRunPolicy.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=tfclusterpolicy,categories=opr8r
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.approval.mode`
// +kubebuilder:printcolumn:name="Approvals",type=integer,JSONPath=`.spec.approval.requiredApprovals`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterTerraformRunPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the policy.
	Spec ClusterTerraformRunPolicySpec `json:"spec"`
	// Status says whether it compiles.
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// ClusterTerraformRunPolicyList is a list of ClusterTerraformRunPolicies.
//
// +kubebuilder:object:root=true
type ClusterTerraformRunPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []ClusterTerraformRunPolicy `json:"items"`
}

// PolicyRef names a policy, at the generation that governed a plan.
type PolicyRef struct {
	// Kind is TerraformRunPolicy or ClusterTerraformRunPolicy.
	Kind string `json:"kind"`
	// Name is the policy's (in the run's namespace for a
	// TerraformRunPolicy).
	Name string `json:"name"`
	// Generation is the policy's metadata.generation.
	Generation int64 `json:"generation"`
	// UID is the policy's metadata.uid: a policy deleted and made again
	// under its name is another policy.
	// +optional
	UID string `json:"uid,omitempty"`
}

// EffectiveApproval is the approval policy that decided a plan's gate:
// the run's spec.approval and every policy that governs it, combined (the
// strictest wins). kubectl tfrun approve reads it to say whether a vote
// will count, as the manager counts it.
type EffectiveApproval struct {
	// Policies are the policies that governed the gate, as they were when
	// the plan reached it. When one of them changes or goes, or another
	// comes, while the plan waits, the plan is held (reason PolicyChanged)
	// until it is planned again, so a policy changed under a waiting plan
	// never loosens it.
	// +optional
	Policies []PolicyRef `json:"policies,omitempty"`
	// Changed says how the policies changed while the plan waited, once
	// they have: the plan stays held until it is planned again, whatever
	// changes after (a policy put back as it was is still a change).
	// +optional
	Changed string `json:"changed,omitempty"`
	// Mode is the combined mode (Manual when any says so).
	Mode ApprovalMode `json:"mode"`
	// RequiredApprovals is the most any requires.
	RequiredApprovals int32 `json:"requiredApprovals"`
	// Approvers are who every policy that names approvers lets decide
	// (unset: anyone RBAC allows).
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
	// SelfApproval is Forbidden when any forbids it.
	// +optional
	SelfApproval SelfApproval `json:"selfApproval,omitempty"`
	// Rejection is Any when any says so.
	// +optional
	Rejection RejectionRule `json:"rejection,omitempty"`
	// Layers are the approvals each layer asks of people by itself: the
	// run's own spec.approval (layer ""), each policy's ("<policy>/",
	// "cluster/<policy>/"). An AutoApprove rule waives its own layer's and
	// those below it, never another's; kubectl tfrun approve reads them
	// to say whether a vote will count, as the manager counts it.
	// +optional
	// +listType=map
	// +listMapKey=layer
	Layers []LayerApprovals `json:"layers,omitempty"`
}

// LayerApprovals is the approvals one layer of a run's combined policy
// asks of people by itself.
type LayerApprovals struct {
	// Layer is "" for the run's own spec.approval, "<policy>/" for a
	// TerraformRunPolicy's, "cluster/<policy>/" for a
	// ClusterTerraformRunPolicy's (the prefix of its rules' names).
	Layer string `json:"layer"`
	// Approvals is how many it asks.
	Approvals int32 `json:"approvals"`
}

func init() {
	SchemeBuilder.Register(&TerraformRunPolicy{}, &TerraformRunPolicyList{}, &ClusterTerraformRunPolicy{}, &ClusterTerraformRunPolicyList{})
}
