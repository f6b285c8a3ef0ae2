package tekton

// The Tekton names opr8r's Tekton policies read (manifests/policy.yaml),
// as Tekton defines them (TestKeysAreTektons): pkg/tenancy's contract test
// requires each name a policy reads to be a Go constant.
const (
	// TaskRunLabel is the label Tekton puts on a TaskRun's pods.
	TaskRunLabel = "tekton.dev/taskRun"
	// GroupPrefix starts the apiVersion of Tekton's kinds.
	GroupPrefix = "tekton.dev/"
)
