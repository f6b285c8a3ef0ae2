package argo

// The Argo names opr8r's Argo policies read (manifests/policy.yaml), as
// Argo defines them (TestKeysAreArgos): pkg/tenancy's contract test
// requires each name a policy reads to be a Go constant.
const (
	// LabelWorkflow is the label Argo puts on a Workflow's pods.
	LabelWorkflow = "workflows.argoproj.io/workflow"
	// AnnotationNodeID is the annotation of a pod's node in its Workflow.
	AnnotationNodeID = "workflows.argoproj.io/node-id"
	// GroupPrefix starts the apiVersion of Argo's kinds.
	GroupPrefix = "argoproj.io/"
)
