package tekton

import (
	"testing"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline"
)

func TestKeysAreTektons(t *testing.T) {
	for mine, tektons := range map[string]string{
		TaskRunLabel:      pipeline.TaskRunLabelKey,
		PipelineRunLabel:  pipeline.PipelineRunLabelKey,
		PipelineTaskLabel: pipeline.PipelineTaskLabelKey,
		GroupPrefix:       pipeline.GroupName + "/",
	} {
		if mine != tektons {
			t.Errorf("%q is %q in Tekton: the policies read Tekton's", mine, tektons)
		}
	}
}
