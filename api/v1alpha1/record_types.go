package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RecordKind is what a TerraformRunRecord holds: the records made to be
// read by people who may not read Secrets. The plan as JSON in clear
// (plan-sensitive.json) is never one: it is kept in Secrets only.
// +kubebuilder:validation:Enum=log;plan.txt;plan.json
type RecordKind string

const (
	// RecordKindLog is a step's log, redacted as the step printed it.
	RecordKindLog RecordKind = "log"
	// RecordKindPlanText is the readable plan, redacted like the log.
	RecordKindPlanText RecordKind = "plan.txt"
	// RecordKindPlanJSON is the plan as JSON with its sensitive values
	// masked.
	RecordKindPlanJSON RecordKind = "plan.json"
)

// TerraformRunRecordSpec is one chunk of one record.
//
// +kubebuilder:validation:XValidation:rule="self.chunk < self.chunks",message="chunk must be below chunks"
type TerraformRunRecordSpec struct {
	// Run is the TerraformRun, in the same namespace, whose record this is.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Run string `json:"run"`

	// RunID is the run's id (its engine object's name, status.run.id).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	RunID string `json:"runID"`

	// Step is the step that wrote the record (plan, apply, check-NAME, ...).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Step string `json:"step"`

	// Kind is what the record holds: log, plan.txt (the readable plan,
	// redacted) or plan.json (the plan as JSON, sensitive values masked).
	Kind RecordKind `json:"kind"`

	// Chunk is this object's place among the record's chunks, from 0.
	// +kubebuilder:validation:Minimum=0
	Chunk int32 `json:"chunk"`

	// Chunks is how many chunks the record has.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Chunks int32 `json:"chunks"`

	// Size is the size of the whole record, in bytes, before it was
	// gzipped.
	// +kubebuilder:validation:Minimum=0
	Size int64 `json:"size"`

	// SHA256 is the sha256 of the whole record (hex), which a reader checks.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`

	// Data is this chunk of the gzipped record (base64 in JSON and YAML).
	// +kubebuilder:validation:MaxLength=1048576
	Data []byte `json:"data"`
}

// TerraformRunRecord keeps one chunk of a record a run's step kept for
// people: a step's log, the readable plan or the plan as JSON, each
// already redacted or masked by the step, gzipped and split into chunks.
// The step pods (the runner service account) and opr8r's manager write
// them; opr8r-approver and opr8r-editor may read them (kubectl tfrun plan
// and logs), without the right to read Secrets. Owned by the TerraformRun;
// pruned with its history (docs/records.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=tfrecord
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.run`
// +kubebuilder:printcolumn:name="Run ID",type=string,JSONPath=`.spec.runID`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.spec.step`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.kind`
// +kubebuilder:printcolumn:name="Chunk",type=integer,JSONPath=`.spec.chunk`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerraformRunRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the chunk.
	Spec TerraformRunRecordSpec `json:"spec"`
}

// TerraformRunRecordList is a list of TerraformRunRecords.
//
// +kubebuilder:object:root=true
type TerraformRunRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the TerraformRunRecords.
	Items []TerraformRunRecord `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TerraformRunRecord{}, &TerraformRunRecordList{})
}
