package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Decision is an approval or a rejection.
// +kubebuilder:validation:Enum=Approve;Reject
type Decision string

const (
	// DecisionApprove approves the plan.
	DecisionApprove Decision = "Approve"
	// DecisionReject rejects the plan.
	DecisionReject Decision = "Reject"
)

// TerraformRunApprovalSpec is one user's decision about one plan of one
// TerraformRun. It cannot change once created: a user who changes their mind
// creates another one (the newest decision of a user counts).
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a TerraformRunApproval is a decision made once; create a new one (kubectl tfrun approve or reject) to change it"
// +kubebuilder:validation:XValidation:rule="!has(self.overrideChangeWindows) || !self.overrideChangeWindows || !has(self.decision) || self.decision == 'Approve'",message="spec.overrideChangeWindows goes with an approval (decision Approve), not a rejection"
type TerraformRunApprovalSpec struct {
	// RunName is the TerraformRun, in the same namespace, whose plan this
	// decides.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	RunName string `json:"runName"`

	// PlanDigest is the plan decided on (the run's status.plan.digest). A
	// decision counts only for this plan.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	PlanDigest string `json:"planDigest"`

	// Decision is Approve (the default) or Reject.
	// +kubebuilder:default=Approve
	// +optional
	Decision Decision `json:"decision,omitempty"`

	// Reason says why; shown in status for a rejection.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`

	// User is the Kubernetes user who created this decision. It is stamped
	// by the API server at admission (the MutatingAdmissionPolicy
	// opr8r-approval-identity) from the request, and a value that is not the
	// requesting user is refused (ValidatingAdmissionPolicy
	// opr8r-approval-identity): leave it empty.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	User string `json:"user,omitempty"`

	// Groups are the requesting user's groups, stamped like user.
	// +listType=atomic
	// +optional
	Groups []string `json:"groups,omitempty"`

	// OverrideChangeWindows, on an approval, lets the plan apply now though
	// spec.approval.windows hold it. It needs the right to update
	// terraformruns/approvalpolicy (the opr8r-policy-admin role), and the
	// run's status records who overrode.
	// +optional
	OverrideChangeWindows bool `json:"overrideChangeWindows,omitempty"`
}

// TerraformRunApproval records one user's approval or rejection of a
// TerraformRun's plan, like a CertificateSigningRequest's approval: the
// right to create it (RBAC) is the right to take part in approving, apart
// from the right to edit the TerraformRun. kubectl tfrun approve and reject
// create them; the run's spec.approval says how many, and whose, count.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=tfapproval;tfa,categories=opr8r
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.runName`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.user`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.spec.planDigest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerraformRunApproval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the decision.
	Spec TerraformRunApprovalSpec `json:"spec"`
}

// TerraformRunApprovalList is a list of TerraformRunApprovals.
//
// +kubebuilder:object:root=true
type TerraformRunApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the TerraformRunApprovals.
	Items []TerraformRunApproval `json:"items"`
}

// SelfApproval says whether the author of a change may approve its plan.
// +kubebuilder:validation:Enum=Allowed;Forbidden
type SelfApproval string

const (
	// SelfApprovalAllowed lets the author approve their own change.
	SelfApprovalAllowed SelfApproval = "Allowed"
	// SelfApprovalForbidden ignores the author's approvals (not their
	// rejections).
	SelfApprovalForbidden SelfApproval = "Forbidden"
)

// RejectionRule says what rejects a plan.
// +kubebuilder:validation:Enum=Any;Quorum
type RejectionRule string

const (
	// RejectByAny: one rejection by an allowed approver rejects the plan.
	RejectByAny RejectionRule = "Any"
	// RejectByQuorum: a plan is rejected when requiredApprovals distinct
	// allowed approvers reject it.
	RejectByQuorum RejectionRule = "Quorum"
)

// Approvers lists who may decide. A user counts when named in users or a
// member of one of groups.
type Approvers struct {
	// Users are Kubernetes user names (as the API server authenticates
	// them, e.g. alice@example.com or system:serviceaccount:ns:name).
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Users []string `json:"users,omitempty"`
	// Groups are Kubernetes group names.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Groups []string `json:"groups,omitempty"`
}

// ApprovalTally is what the approval policy has counted for the plan that
// waits (or was last decided).
type ApprovalTally struct {
	// Digest is the plan counted for.
	Digest string `json:"digest"`
	// Required is how many distinct users must approve.
	Required int32 `json:"required"`
	// ApprovedBy are the users whose approvals count, oldest first.
	// +optional
	ApprovedBy []string `json:"approvedBy,omitempty"`
	// Needed is how many more approvals the plan needs.
	Needed int32 `json:"needed"`
	// Summary is "approvals/required", for the printer column, e.g. "1/2".
	Summary string `json:"summary"`
	// RejectedBy are the users whose rejections count.
	// +optional
	RejectedBy []string `json:"rejectedBy,omitempty"`
	// Ignored are decisions that do not count, and why.
	// +optional
	Ignored []IgnoredDecision `json:"ignored,omitempty"`
	// Rules are the rules of spec.approval.rules that matched the plan,
	// and what each required.
	// +optional
	Rules []RuleTally `json:"rules,omitempty"`
	// ChangeWindow says whether spec.approval.windows let the plan apply
	// now, and when they will if not.
	// +optional
	ChangeWindow *ChangeWindowStatus `json:"changeWindow,omitempty"`
	// Policy is the approval policy that counted: the run's spec.approval
	// and the policies that govern it (TerraformRunPolicy,
	// ClusterTerraformRunPolicy), combined.
	// +optional
	Policy *EffectiveApproval `json:"policy,omitempty"`
	// Deadline is when the plan's wait for approval times out (the
	// policy's timeout from when it reached the gate); approvals made
	// after it do not count.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
}

// ChangeWindowStatus is where spec.approval.windows stand for a plan.
type ChangeWindowStatus struct {
	// Open is true when the plan may apply now.
	Open bool `json:"open"`
	// Message says which window holds the plan.
	// +optional
	Message string `json:"message,omitempty"`
	// OpensAt is when the plan may apply, if it is held.
	// +optional
	OpensAt *metav1.Time `json:"opensAt,omitempty"`
	// OverriddenBy names the policy admin, and their TerraformRunApproval,
	// who let the plan apply outside its windows.
	// +optional
	OverriddenBy string `json:"overriddenBy,omitempty"`
	// Overridable says, of windows that hold the plan, whether a policy
	// admin's approval with overrideChangeWindows would open them now:
	// every closed one is the run's or a namespace policy's (a
	// ClusterTerraformRunPolicy's window no override opens).
	// +optional
	Overridable bool `json:"overridable,omitempty"`
}

// RuleTally is one rule that matched a plan.
type RuleTally struct {
	// Name is the rule's.
	Name string `json:"name"`
	// Effect is the rule's.
	Effect RuleEffect `json:"effect"`
	// Required is how many approvals a Require rule needs.
	// +optional
	Required int32 `json:"required,omitempty"`
	// ApprovedBy are the approvals that count for a Require rule.
	// +optional
	ApprovedBy []string `json:"approvedBy,omitempty"`
	// Needed is how many more approvals a Require rule needs.
	// +optional
	Needed int32 `json:"needed,omitempty"`
	// Approvers are who a Require rule counts (unset: anyone the rest of
	// the policy counts).
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
	// Message is the rule's message, or why its condition failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// IgnoredDecision is a decision the approval policy does not count.
type IgnoredDecision struct {
	// User made it ("" when no user was stamped).
	User string `json:"user"`
	// Source is where it was made: the TerraformRunApproval's name,
	// spec.approval or the engine.
	Source string `json:"source"`
	// Reason says why it does not count.
	Reason string `json:"reason"`
}

func init() {
	SchemeBuilder.Register(&TerraformRunApproval{}, &TerraformRunApprovalList{})
}
